"""GymRows: a single gymnasium env stepped straight into its rows of a batched env's buffers.

SerialEnv and ParallelEnv keep one preallocated row per sub-env (see ``EnvBase._row_stepper``).
The public ``step_and_maybe_reset`` of a GymWrapper builds TensorDicts that the batched env then
copies into those rows; for the common case (one env, a Box observation, a Discrete or Box
action, no info entries, no pixels) this writes gymnasium's numpy results into the rows through
numpy views instead: one copy per value, no TensorDict per step, the same data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.libs._gym_spaces import _BoxCodec, _DiscreteCodec
from tdrl.errors import SpecError

if TYPE_CHECKING:
    from tdrl.envs.libs._gymnasium import GymWrapper

__all__ = ["GymRows"]

_NEXT = {"observation", "reward", "done", "terminated", "truncated"}
_ROOT = {"observation", "done", "terminated", "truncated"}


def _cpu_leaves(td: TensorDictBase, names: set[str]) -> dict[str, torch.Tensor] | None:
    """The root leaves of a plain TensorDict row when they are exactly ``names`` on the cpu."""
    if type(td) is not TensorDict or set(td.keys()) != names:
        return None
    leaves = {k: td.get(k) for k in names}
    if any(type(v) is not torch.Tensor or v.device.type != "cpu" for v in leaves.values()):
        return None
    return leaves


class GymRows:
    """The row stepper of a GymWrapper (built by :meth:`GymRows.build`, called by the batched
    env's runner as ``stepper(reset)``; see ``EnvBase._row_stepper``)."""

    def __init__(
        self,
        owner: GymWrapper,
        action: torch.Tensor,
        nxt: dict[str, torch.Tensor],
        root: dict[str, torch.Tensor],
    ) -> None:
        self._owner = owner
        self._env = owner.env
        self._encode = owner._act_codec.encode
        self._action = action
        self._tensors = (nxt, root)
        self._views()
        # what gymnasium must return (the general path would fail on another shape)
        self._shape = tuple(owner.env.observation_space.shape)

    def _views(self) -> None:
        """numpy views of the row tensors (made again after a copy: numpy arrays do not keep
        sharing torch memory through ``copy.deepcopy``, the tensors do)."""
        nxt, root = self._tensors
        self._obs, self._reward = nxt["observation"].numpy(), nxt["reward"].numpy()
        self._done, self._term = nxt["done"].numpy(), nxt["terminated"].numpy()
        self._trunc = nxt["truncated"].numpy()
        self._root_obs = root["observation"].numpy()
        self._root_flags = [root[k].numpy() for k in ("done", "terminated", "truncated")]

    def __getstate__(self) -> dict[str, Any]:
        views = ("_obs", "_reward", "_done", "_term", "_trunc", "_root_obs", "_root_flags")
        return {k: v for k, v in self.__dict__.items() if k not in views}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    @staticmethod
    def build(
        owner: GymWrapper, inputs: TensorDictBase, nxt: TensorDictBase, root: TensorDictBase
    ) -> GymRows | None:
        """The stepper of ``owner`` for these rows, or None when the general path is needed."""
        from tdrl.envs.libs._gymnasium import GymWrapper

        cls = type(owner)
        if (
            owner.is_vector
            or owner._pixels is not None
            or owner._info.specs
            or owner._obs_is_dict
            or owner._same_step
            or owner.run_type_checks
            or owner.validate
            or (owner.device is not None and owner.device.type != "cpu")
            or type(owner._obs_codec) is not _BoxCodec
            or type(owner._act_codec) not in (_BoxCodec, _DiscreteCodec)
            # a subclass that changes how the env steps or resets keeps the general path
            or any(
                getattr(cls, m) is not getattr(GymWrapper, m)
                for m in ("step", "_step", "_reset", "reset", "step_and_maybe_reset")
            )
        ):
            return None
        next_leaves, root_leaves = _cpu_leaves(nxt, _NEXT), _cpu_leaves(root, _ROOT)
        action = inputs.get("action", None) if type(inputs) is TensorDict else None
        if next_leaves is None or root_leaves is None or type(action) is not torch.Tensor:
            return None
        return GymRows(owner, action, next_leaves, root_leaves)

    def __call__(self, reset: bool) -> bool:
        action = self._encode(self._action)
        if isinstance(action, np.ndarray):
            action = action.copy()  # the input row is overwritten by the next step
        obs, reward, terminated, truncated, _ = self._env.step(action)
        term, trunc = bool(terminated), bool(truncated)
        self._check(obs)
        self._obs[...] = obs
        self._reward[0] = reward
        self._term[0], self._trunc[0], self._done[0] = term, trunc, term or trunc
        if not (reset and (term or trunc)):
            return False
        obs, _ = self._env.reset(seed=self._owner._take_seed())
        self._check(obs)
        self._root_obs[...] = obs
        for flag in self._root_flags:
            flag[0] = False
        return True

    def _check(self, obs: Any) -> None:
        if np.shape(obs) != self._shape:
            raise SpecError(
                f"{type(self._owner).__name__}.step: entry 'observation' has the wrong shape "
                f"(got {np.shape(obs)}; expected {self._shape} from the observation space). "
                "Fix the env or its observation_space."
            )
