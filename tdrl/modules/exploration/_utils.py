"""Helpers shared by the exploration modules (keys, specs, batch shapes, annealing)."""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.specs import Composite, TensorSpec

DeviceLike = torch.device | str | int | None

__all__ = [
    "DeviceLike",
    "action_spec",
    "anneal",
    "as_tuple",
    "parent_batch",
    "sibling",
    "unsqueeze_to",
]


def as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(cast(tuple[str, ...], key))


def sibling(key: NestedKey, name: str) -> NestedKey:
    """``name`` next to ``key``: ``("agents", "action") -> ("agents", name)``."""
    path = as_tuple(key)
    return name if len(path) == 1 else (*path[:-1], name)


def parent_batch(tensordict: TensorDictBase, key: NestedKey) -> torch.Size:
    """Batch size of the (sub-)tensordict that holds ``key``: one draw per env (or agent)."""
    path = as_tuple(key)
    if len(path) == 1:
        return tensordict.batch_size
    return tensordict.get(cast(Any, path[:-1])).batch_size


def unsqueeze_to(flag: torch.Tensor, ndim: int) -> torch.Tensor:
    """Appends size-1 dims so ``flag`` broadcasts against a tensor of ``ndim`` dims."""
    return flag.reshape(*flag.shape, *([1] * (ndim - flag.ndim)))


def action_spec(spec: TensorSpec, key: NestedKey, where: str) -> TensorSpec:
    """The leaf spec of the action: ``spec`` itself, or its entry ``key`` in a Composite."""
    if not isinstance(spec, Composite):
        return spec
    leaf = spec.get(cast(Any, key), None)
    if leaf is None or isinstance(leaf, Composite):
        raise KeyError(
            f"{where}: the spec has no leaf for the action key (got key {key!r}, spec keys"
            f" {spec.keys(include_nested=True, leaves_only=True)}; expected a leaf spec at that"
            " key). Pass the action spec itself or fix action_key."
        )
    return cast(TensorSpec, leaf)


def anneal(current: torch.Tensor, start: float, end: float, num_steps: int, frames: int) -> None:
    """Moves ``current`` linearly from ``start`` towards ``end`` by ``frames`` of ``num_steps``."""
    delta = (end - start) * frames / num_steps
    value = current.item() + delta
    value = max(value, end) if end <= start else min(value, end)
    current.fill_(value)


def check_positive(value: int, name: str, where: str) -> None:
    if value <= 0:
        raise ValueError(
            f"{where}: {name} must be positive (got {value}; expected > 0). Pass e.g. 1000."
        )


def decreasing(start: float, end: float, names: tuple[str, str], where: str) -> None:
    """TorchRL's rule: an annealed noise scale may only decrease (or stay constant)."""
    if end > start:
        raise ValueError(
            f"{where}: {names[1]} is larger than {names[0]} (got {names[0]}={start},"
            f" {names[1]}={end}; expected {names[1]} <= {names[0]}). The scale anneals down."
        )
