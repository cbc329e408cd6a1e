"""Helpers shared by the built-in envs: generators, reset masks and discrete action specs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.specs import Categorical, OneHot, TensorSpec

__all__ = [
    "action_index",
    "discrete_action_spec",
    "kept_done_flags",
    "make_generator",
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


def seed_generator(gen: torch.Generator, seed: int) -> None:
    """Seeds ``gen`` with ``seed`` (negative seeds are folded into the valid range)."""
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
    """``OneHot(n)`` of shape ``[*B, n]`` (bool), or ``Categorical(n)`` of shape ``[*B]``."""
    if categorical_action_encoding:
        return Categorical(n, shape=batch_size, device=device)
    return OneHot(n, shape=(*batch_size, n), device=device)


def action_index(action: torch.Tensor, categorical_action_encoding: bool) -> torch.Tensor:
    """The chosen index (int64, shape ``[*B]``) of a one-hot or categorical action."""
    if categorical_action_encoding:
        return action.long()
    return action.to(torch.uint8).argmax(-1)
