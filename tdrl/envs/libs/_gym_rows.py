"""GymRows: a single gymnasium env stepped straight into rows of preallocated buffers.

SerialEnv and ParallelEnv keep one preallocated row per sub-env, rollouts and collectors one row
per step (see ``EnvBase._row_writer``). The public ``step`` of a GymWrapper builds a TensorDict
of fresh tensors that the caller then copies or stacks; for the common case (one env, a Box
observation, a Discrete or Box action, no info entries, no pixels) this writes gymnasium's
numpy results into the rows through numpy views instead: one copy per value, no TensorDict per
step, the same data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core._row_run import overrides_bypassed
from tdrl.envs.libs._gym_spaces import _BoxCodec, _DiscreteCodec
from tdrl.errors import SpecError

if TYPE_CHECKING:
    from tdrl.envs.libs._gymnasium import GymWrapper

__all__ = ["GymRows"]

_FLAGS = ("done", "terminated", "truncated")
_NEXT = ("observation", "reward", *_FLAGS)
_ROOT = ("observation", *_FLAGS)


def _cpu_leaves(
    td: TensorDictBase, names: tuple[str, ...], shapes: dict[str, Any], dtypes: dict[str, Any]
) -> dict[str, torch.Tensor] | None:
    """The root leaves of a plain TensorDict of rows when they are exactly ``names``, on the
    cpu, shaped ``[rows, *shape]`` with the shapes and dtypes this env's data has."""
    if type(td) is not TensorDict or set(td.keys()) != set(names) or td.batch_dims != 1:
        return None
    leaves = {k: td.get(k) for k in names}
    for k, v in leaves.items():
        if (
            type(v) is not torch.Tensor
            or v.device.type != "cpu"
            or v.shape[1:] != shapes[k]
            or v.dtype != dtypes[k]
        ):
            return None
    return leaves


class GymRows:
    """The row writer of a GymWrapper (built by :meth:`GymRows.build`; see
    ``EnvBase._row_writer``): ``step(td, row, reset_row)`` steps the env with the action of
    ``td``, writes the results into row ``row`` of the next buffers and, when the episode ended
    and ``reset_row`` is given, resets the env into row ``reset_row`` of the root buffers."""

    reads: tuple[str, ...]

    def __init__(
        self, owner: GymWrapper, nxt: dict[str, torch.Tensor], root: dict[str, torch.Tensor]
    ) -> None:
        self._owner = owner
        self._env = owner.env
        self.reads = ("action",)
        self._encode = owner._act_codec.encode
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
        self._root_flags = [root[k].numpy() for k in _FLAGS]

    def __getstate__(self) -> dict[str, Any]:
        views = ("_obs", "_reward", "_done", "_term", "_trunc", "_root_obs", "_root_flags")
        return {k: v for k, v in self.__dict__.items() if k not in views}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    @staticmethod
    def possible(owner: GymWrapper) -> bool:
        """Whether ``owner`` can have a writer at all (one env, a Box observation, a Discrete
        or Box action, no info entries, no pixels, no frame skip, on the cpu, the wrapper's own
        methods)."""
        from tdrl.envs.libs._gymnasium import GymWrapper

        return not (
            owner.is_vector
            or owner._pixels is not None
            or owner._info.specs
            or owner._obs_is_dict
            or owner._same_step
            or owner.wrapper_frame_skip != 1
            or owner.run_type_checks
            or owner.validate
            or (owner.device is not None and owner.device.type != "cpu")
            or type(owner._obs_codec) is not _BoxCodec
            or type(owner._act_codec) not in (_BoxCodec, _DiscreteCodec)
            or overrides_bypassed(owner, GymWrapper)
        )

    @staticmethod
    def build(owner: GymWrapper, nxt: TensorDictBase, root: TensorDictBase) -> GymRows | None:
        """The writer of ``owner`` for these buffers, or None when the general path is needed."""
        if not GymRows.possible(owner):
            return None
        obs = owner.full_observation_spec["observation"]
        shapes = {"observation": obs.shape, "reward": torch.Size([1])}
        dtypes = {"observation": obs.dtype, "reward": torch.float32}
        for flag in _FLAGS:
            shapes[flag], dtypes[flag] = torch.Size([1]), torch.bool
        next_leaves = _cpu_leaves(nxt, _NEXT, shapes, dtypes)
        root_leaves = _cpu_leaves(root, _ROOT, shapes, dtypes)
        if next_leaves is None or root_leaves is None:
            return None
        return GymRows(owner, next_leaves, root_leaves)

    def step(self, td: TensorDictBase, row: int, reset_row: int | None) -> bool:
        """One step: the action of ``td`` in, row ``row`` of ``"next"`` out; returns whether the
        episode ended (after which, given ``reset_row``, the env was reset into that row)."""
        value = td._tensordict.get("action") if type(td) is TensorDict else None
        action = self._encode(td.get("action") if value is None else value)
        obs, reward, terminated, truncated, _ = self._env.step(action)  # (encode copies arrays)
        term, trunc = bool(terminated), bool(truncated)
        if type(obs) is not np.ndarray or obs.shape != self._shape:
            self._check(obs, "step")
        self._obs[row] = obs
        self._reward[row, 0] = reward
        self._term[row, 0], self._trunc[row, 0] = term, trunc
        self._done[row, 0] = done = term or trunc
        if done and reset_row is not None:
            self.reset(reset_row)
        return done

    def reset(self, row: int) -> None:
        """Resets the env into row ``row`` of the root buffers."""
        obs, _ = self._env.reset()
        self._check(obs, "reset")
        self._root_obs[row] = obs
        for flag in self._root_flags:
            flag[row, 0] = False

    def _check(self, obs: Any, method: str) -> None:
        shape = obs.shape if type(obs) is np.ndarray else np.shape(obs)
        if shape != self._shape:
            raise SpecError(
                f"{type(self._owner).__name__}.{method}: entry 'observation' has the wrong shape "
                f"(got {shape}; expected {self._shape} from the observation space). "
                "Fix the env or its observation_space."
            )
