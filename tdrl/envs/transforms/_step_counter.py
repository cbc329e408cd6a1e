"""StepCounter: per-done-group step counts and truncation at a step limit."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.core._fast import lookup, put
from tdrl.envs.core._keys import key_tuple
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import with_prefix
from tdrl.specs import Bounded, Categorical, Composite, TensorSpec

__all__ = ["StepCounter"]

_ONE = torch.ones((), dtype=torch.int64)  # never written: the +1 of every count


class StepCounter(Transform):
    """Counts the steps of every done group since its last reset; truncates at ``max_steps``.

    For each done group (prefix ``p``) the transform writes ``(*p, step_count_key)``, an int64
    tensor of the group's done shape (per agent for per-agent groups): 0 after a reset, +1 at
    every step. With ``max_steps``, once the count reaches it the group's ``truncated`` leaf
    (added to the done spec when the group has none) and, with ``update_done``, its ``done``
    leaf become true. Only groups (and agents) whose ``_reset`` is true restart from 0.

    The count is read back from the root at each step, so it is declared in both the
    observation and the state spec (batched envs and collectors carry it like any state).

    Args:
        max_steps: the step at which episodes are truncated (``None``: count only).
        truncated_key: leaf name of the truncation flag.
        step_count_key: leaf name of the count.
        update_done: also set ``done`` when truncating.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=100), StepCounter(max_steps=3))
        >>> td = env.rollout(10)
        >>> td["next", "step_count"].flatten().tolist(), td["next", "truncated"].flatten().tolist()
        ([1, 2, 3], [False, False, True])
    """

    def __init__(
        self,
        max_steps: int | None = None,
        truncated_key: str = "truncated",
        step_count_key: str = "step_count",
        update_done: bool = True,
    ) -> None:
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(
                f"StepCounter.__init__: max_steps must be positive (got {max_steps}; expected "
                "an int >= 1 or None). Pass None to count without truncating."
            )
        super().__init__()
        self.max_steps = None if max_steps is None else int(max_steps)
        self.step_count_key = step_count_key
        self.truncated_key = truncated_key
        self.update_done = update_done
        self._groups: list[tuple[NestedKey, NestedKey, NestedKey, torch.Size]] = []
        self._paths: list[tuple[tuple[str, ...], ...]] = []

    def _bind(self, parent: EnvBase) -> None:
        done = parent.full_done_spec
        self._groups = [
            (
                with_prefix(g.prefix, self.step_count_key),
                g.done,
                with_prefix(g.prefix, self.truncated_key),
                done[g.done].shape,
            )
            for g in parent.done_groups
        ]
        self.out_keys = [g[0] for g in self._groups]
        self._paths = [(key_tuple(c), key_tuple(d), key_tuple(t)) for c, d, t, _ in self._groups]

    def _count_spec(self, shape: torch.Size, device: torch.device | None) -> TensorSpec:
        # TorchRL's: from 0 to the int64 maximum, whatever max_steps is
        high = torch.iinfo(torch.int64).max
        return Bounded(0, high, shape=shape, dtype=torch.int64, device=device)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for count, _, _, shape in self._groups:
            observation_spec[count] = self._count_spec(shape, observation_spec.device)
        return observation_spec

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        for count, _, _, shape in self._groups:
            state_spec[count] = self._count_spec(shape, state_spec.device)
        return state_spec

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        if self.max_steps is None:
            return done_spec
        for _, done, trunc, shape in self._groups:
            if trunc not in done_spec:
                done_spec[trunc] = Categorical(
                    2, shape=shape, dtype=torch.bool, device=done_spec[done].device
                )
        return done_spec

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        device = tensordict_out.device
        for count, _, trunc, shape in self._groups:
            zeros = torch.zeros(shape, dtype=torch.int64, device=device)
            tensordict_out.set(count, self._where_reset(tensordict_in, count, zeros))
            if self.max_steps is not None and tensordict_out.get(trunc, None) is None:
                no = torch.zeros(shape, dtype=torch.bool, device=device)
                tensordict_out.set(trunc, self._where_reset(tensordict_in, trunc, no))
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for (count_key, _, _, _), (count_path, done, trunc_path) in zip(self._groups, self._paths):
            prev = lookup(tensordict, count_path)
            if prev is None:
                raise self._missing_key(count_key, tensordict, "_step")
            count = prev + _ONE  # a tensor operand: a third cheaper than wrapping the int 1
            put(next_tensordict, count_path, count)
            if self.max_steps is None:
                continue
            trunc = count >= self.max_steps
            old = lookup(next_tensordict, trunc_path)
            put(next_tensordict, trunc_path, trunc if old is None else old | trunc)
            if self.update_done:
                flag = lookup(next_tensordict, done)
                if flag is None:
                    raise self._missing_key(done, next_tensordict, "_step")
                put(next_tensordict, done, flag | trunc)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise self._env_only("forward")

    def extra_repr(self) -> str:
        return f"max_steps={self.max_steps}, step_count_key={self.step_count_key!r}"
