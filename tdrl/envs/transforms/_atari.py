"""EndOfLifeTransform: the loss-of-a-life signal of Atari games, without a reset."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.envs.transforms._base import Transform
from tdrl.specs import Composite, Unbounded

__all__ = ["EndOfLifeTransform"]


class EndOfLifeTransform(Transform):
    """Writes ``eol_key``: true on the step where the game lost a life (or the episode ended).

    DeepMind's DQN treats the loss of a life as the end of an episode for the value targets
    while the game goes on. As in TorchRL, the signal is an observation entry, not a done entry,
    so the env does not reset on it; point the loss at it (:meth:`register_keys`). The lives
    count is read from the base env at every reset and step through ``eol_attribute`` (a dotted
    path looked up on the base env, then on the gymnasium env it wraps; a callable at the end is
    called), and written to ``lives_key`` (int64, shape of the env's batch). On a step,
    ``eol_key = (lives before > lives after) | done``; after a reset it is false.

    Unlike TorchRL, which reads the previous count from the input's ``lives_key``, the previous
    count is kept in the transform (it is the env's own count, so the two agree), so the
    transform also works inside the workers of a batched env, where the input carries only
    actions and states. Place it inside the worker's env (``ParallelEnv(n, make_atari_env)``).

    Args:
        eol_key: where the end-of-life flag goes (shape and dtype of ``done_key``'s spec).
        lives_key: where the lives count goes.
        done_key: the done entry of the env.
        eol_attribute: the dotted path to the lives count (default: ALE's ``lives()``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> base = CountingEnv(max_steps=9)
        >>> counts = iter([3, 3, 2, 2, 1])  # what the game reports at the reset, then each step
        >>> base.lives = lambda: next(counts)
        >>> env = TransformedEnv(base, EndOfLifeTransform(eol_attribute="lives"))
        >>> data = env.rollout(4)
        >>> data["next", "end-of-life"].flatten().tolist(), data["next", "lives"].tolist()
        ([False, True, False, True], [3, 2, 2, 1])
    """

    def __init__(
        self,
        eol_key: NestedKey = "end-of-life",
        lives_key: NestedKey = "lives",
        done_key: NestedKey = "done",
        eol_attribute: str = "unwrapped.ale.lives",
    ) -> None:
        super().__init__(in_keys=[done_key], out_keys=[eol_key, lives_key])
        self.eol_key = unravel_key(eol_key)
        self.lives_key = unravel_key(lives_key)
        self.done_key = unravel_key(done_key)
        self.eol_attribute = eol_attribute.split(".")
        self._lives: torch.Tensor | None = None

    def _get_lives(self, method: str) -> torch.Tensor:
        parent = self._require_parent(method)
        base: Any = parent
        while hasattr(base, "base_env"):
            base = base.base_env
        holders = [base, getattr(base, "env", None)]
        for holder in holders:
            value = holder
            try:
                for name in self.eol_attribute:
                    value = getattr(value, name)
            except AttributeError:
                continue
            value = value() if callable(value) else value
            lives = torch.as_tensor(value, dtype=torch.int64, device=parent.device)
            return lives.reshape(parent.batch_size)
        raise AttributeError(
            f"EndOfLifeTransform.{method}: the base env has no lives count at "
            f"{'.'.join(self.eol_attribute)!r} (got {type(base).__name__}; expected an attribute "
            "path on it or on the gymnasium env it wraps, e.g. 'unwrapped.ale.lives'). Use an ALE "
            "env, pass eol_attribute, or place the transform inside each worker of a batched env."
        )

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        parent = self._require_parent("transform_observation_spec")
        done = parent.full_done_spec.get(self.done_key, None)
        if done is None:
            raise self._missing_key(self.done_key, parent.full_done_spec, "transform_spec")
        observation_spec[self.eol_key] = done.clone()
        observation_spec[self.lives_key] = Unbounded(
            parent.batch_size, device=parent.device, dtype=torch.int64
        )
        return observation_spec

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        parent = self._require_parent("_reset")
        self._lives = self._get_lives("_reset")
        shape = parent.full_done_spec[self.done_key].shape
        tensordict_out.set(
            self.eol_key, torch.zeros(shape, dtype=torch.bool, device=tensordict_out.device)
        )
        return tensordict_out.set(self.lives_key, self._lives.clone())

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        lives = self._get_lives("_step")
        if self._lives is None:
            raise RuntimeError(
                "EndOfLifeTransform._step: no lives count from a reset (got none; expected a "
                "reset before the first step). Reset the env first."
            )
        done = next_tensordict.get(self.done_key, None)
        if done is None:
            raise self._missing_key(self.done_key, next_tensordict, "_step")
        lost = self._lives > lives
        lost = lost.reshape(*lost.shape, *([1] * (done.ndim - lost.ndim)))
        self._lives = lives
        next_tensordict.set(self.eol_key, lost.expand_as(done) | done)
        return next_tensordict.set(self.lives_key, lives.clone())

    def register_keys(self, loss_or_advantage: Any) -> None:
        """Points a loss (or value estimator) at the end-of-life flag for ``done`` and
        ``terminated``, as TorchRL: ``set_keys(done=eol_key, terminated=eol_key)``."""
        loss_or_advantage.set_keys(done=self.eol_key, terminated=self.eol_key)

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict  # the flag is written by _step and _reset only (they know the env)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def extra_repr(self) -> str:
        return f"eol_key={self.eol_key!r}, eol_attribute={'.'.join(self.eol_attribute)!r}"
