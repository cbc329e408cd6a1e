"""Helpers to find the spec of one output key (a leaf spec, or an entry of a Composite)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from tensordict.utils import NestedKey

from tdrl.specs import Composite, TensorSpec

__all__ = ["as_key_list", "spec_for_key"]


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
