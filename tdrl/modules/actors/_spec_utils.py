"""Helpers to find the spec of one output key (a leaf spec, or an entry of a Composite)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from tensordict.utils import NestedKey

from tdrl.specs import Composite, TensorSpec

__all__ = ["as_key_list", "event_shape", "spec_for_key"]


def as_key_list(keys: NestedKey | Sequence[NestedKey]) -> list[NestedKey]:
    """A str or a tuple of str is one (nested) key; a list holds several keys."""
    if isinstance(keys, str) or (isinstance(keys, tuple) and all(isinstance(k, str) for k in keys)):
        return [keys]
    return list(keys)


def spec_for_key(spec: TensorSpec | None, key: NestedKey, first: bool) -> TensorSpec | None:
    """The leaf spec of ``key``: the entry of a Composite, or a leaf spec for the first key."""
    if spec is None:
        return None
    if isinstance(spec, Composite):
        found = spec.get(cast(Any, key), None)
        return found if isinstance(found, TensorSpec) and not isinstance(found, Composite) else None
    return spec if first else None


def event_shape(spec: TensorSpec | None, key: NestedKey, leaf: TensorSpec) -> tuple[int, ...]:
    """The shape of one element of ``key``'s leaf: its shape past the dims of the Composite
    that holds it (an agent group's Composite includes the agent dim). For a bare leaf spec
    there is no such Composite: the whole leaf shape is returned."""
    if not isinstance(spec, Composite):
        return tuple(leaf.shape)
    path = (key,) if isinstance(key, str) else tuple(key)
    parent = spec if len(path) == 1 else spec.get(cast(Any, path[:-1]), None)
    lead = len(parent.shape) if isinstance(parent, Composite) else 0
    return tuple(leaf.shape[lead:])
