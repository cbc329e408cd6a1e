"""Helpers shared by the built-in envs: generators, reset masks, discrete action specs and the
base of the envs whose state lives in the env."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.specs import Categorical, OneHot, TensorSpec

__all__ = [
    "StatefulEnvBase",
    "action_index",
    "discrete_action_spec",
    "kept_done_flags",
    "make_generator",
    "move_state",
    "read_mask",
    "seed_generator",
]


def make_generator(device: torch.device | None) -> torch.Generator:
    """A generator on ``device``, seeded from the global torch RNG.

    Seeding from the global RNG makes ``torch.manual_seed`` enough for reproducible envs, while
    the env's own draws never disturb the global stream (or the policy's samples) afterwards.
    """
    gen = torch.Generator(device=device or "cpu")
    gen.manual_seed(int(torch.randint(0, 2**62, ()).item()))
    return gen


def move_state(env: object, device: torch.device) -> None:
    """Moves the tensors and generators an env holds as attributes to ``device`` (its ``_to``).

    A generator cannot change device: it is replaced by one on ``device`` seeded with a draw
    from the old one, so a moved env stays reproducible.
    """
    for name, value in list(vars(env).items()):
        if isinstance(value, torch.Tensor):
            setattr(env, name, value.to(device))
        elif isinstance(value, torch.Generator) and value.device != device:
            gen = torch.Generator(device=device)
            gen.manual_seed(int(torch.randint(0, 2**62, (), generator=value).item()))
            setattr(env, name, gen)


def seed_generator(gen: torch.Generator, seed: int | None) -> None:
    """Seeds ``gen`` with ``seed`` (negative seeds are folded into the valid range).

    ``None`` seeds it from fresh entropy.
    """
    if seed is None:
        gen.seed()
        return
    gen.manual_seed(seed % (2**63))


def read_mask(
    tensordict: TensorDictBase | None, key: NestedKey, shape: Sequence[int]
) -> torch.Tensor | None:
    """The ``_reset`` entry ``key`` of ``tensordict`` as a bool tensor of ``shape`` (or None).

    ``_reset`` entries may come with or without their trailing singleton dim; both are accepted.
    """
    if tensordict is None:
        return None
    mask = tensordict.get(key, None)
    if mask is None:
        return None
    return mask.reshape(shape).bool()


def kept_done_flags(tensordict: TensorDictBase, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Root ``done``/``terminated``/``truncated`` after a partial reset of ``mask`` ([*B, 1]).

    False where a member resets, the input's values elsewhere (False when the input has none):
    with it a ``_reset`` returns the merged data for the whole batch, so the env can skip
    EnvBase's generic merge (``_merge_reset``).
    """
    keep = ~mask
    out = {}
    for key in ("done", "terminated", "truncated"):
        old = tensordict.get(key, None)
        out[key] = keep & old if old is not None else torch.zeros_like(mask)
    return out


def discrete_action_spec(
    n: int,
    batch_size: torch.Size,
    device: torch.device | None,
    categorical_action_encoding: bool,
) -> TensorSpec:
    """``OneHot(n)`` of shape ``[*B, n]`` (int64), or ``Categorical(n)`` of shape ``[*B]``.

    One-hot actions are int64, as gymnasium's ``Discrete`` spaces give through ``GymEnv`` and as
    TorchRL's greedy ``QValueModule`` and one-hot distributions write them.
    """
    if categorical_action_encoding:
        return Categorical(n, shape=batch_size, device=device)
    return OneHot(n, shape=(*batch_size, n), device=device, dtype=torch.int64)


def action_index(action: torch.Tensor, categorical_action_encoding: bool) -> torch.Tensor:
    """The chosen index (int64, shape ``[*B]``) of a one-hot or categorical action."""
    if categorical_action_encoding:
        return action.long()
    return action.to(torch.uint8).argmax(-1)


class StatefulEnvBase(EnvBase):
    """An env whose state ``[*B, D]`` and step counter ``[*B, 1]`` live in the env.

    Subclasses call :meth:`_init_state` in ``__init__`` right after ``EnvBase.__init__`` (it
    checks ``max_episode_steps`` and creates the state, counter and generator) and implement
    :meth:`_observation` (the observation of the current state) and :meth:`_fresh_state` (a
    state drawn for every member at reset). ``_reset`` resets the members flagged in ``_reset``
    (all of them without one) and returns every member's entries, so EnvBase's merge is skipped.
    """

    _rng: torch.Generator
    _state: torch.Tensor
    _steps: torch.Tensor
    _false: torch.Tensor

    def _init_state(self, dim: int, max_episode_steps: int) -> None:
        if max_episode_steps < 1:
            raise ValueError(
                f"{type(self).__name__}.__init__: max_episode_steps must be positive (got "
                f"{max_episode_steps}; expected >= 1). Pass a positive horizon."
            )
        self.max_episode_steps = int(max_episode_steps)
        b, dev = self.batch_size, self.device
        self._rng = make_generator(dev)
        self._state = torch.zeros((*b, dim), device=dev)
        self._steps = torch.zeros((*b, 1), dtype=torch.int64, device=dev)
        self._false = torch.zeros((*b, 1), dtype=torch.bool, device=dev)

    def _to(self, device: torch.device) -> None:
        move_state(self, device)

    def _observation(self) -> torch.Tensor:
        raise NotImplementedError

    def _fresh_state(self) -> torch.Tensor:
        raise NotImplementedError

    def _place(self, state: torch.Tensor, step_count: torch.Tensor | int) -> TensorDictBase:
        """``set_state``: every member in ``state`` after ``step_count`` steps; the root data."""
        b, dim = self.batch_size, self._state.shape[-1]
        state = torch.as_tensor(state, device=self._state.device).to(torch.float32)
        self._state = state.expand(*b, dim).clone()
        steps = torch.as_tensor(step_count, dtype=torch.int64, device=self._steps.device)
        self._steps = steps.expand(*b, 1).clone()
        return self._output(None)

    def _output(self, extra: dict[str, torch.Tensor] | None) -> TensorDictBase:
        data = {"observation": self._observation()}
        if extra is None:
            data.update(
                done=self._false.clone(),
                terminated=self._false.clone(),
                truncated=self._false.clone(),
            )
        else:
            data.update(extra)
        return TensorDict._new_unsafe(data, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        fresh = self._fresh_state()
        mask = read_mask(tensordict, "_reset", (*self.batch_size, 1))
        if mask is None:
            self._state = fresh
            self._steps = torch.zeros_like(self._steps)
            return self._output(None)
        self._state = torch.where(mask, fresh, self._state)
        self._steps = torch.where(mask, 0, self._steps)
        return self._output(kept_done_flags(tensordict, mask))  # type: ignore[arg-type]

    def _merge_reset(
        self, old: TensorDictBase, new: TensorDictBase, masks: list[torch.Tensor | None]
    ) -> TensorDictBase:
        # _reset returns every member's entries (the old ones where no reset was asked).
        return old.update(new)

    def _set_seed(self, seed: int | None) -> None:
        seed_generator(self._rng, seed)
