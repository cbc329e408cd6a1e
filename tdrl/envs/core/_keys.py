"""Nested-key helpers shared by the env core: normalisation, done groups and reset masks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from tensordict.utils import NestedKey

__all__ = [
    "DoneGroup",
    "as_key",
    "broadcast_mask",
    "key_prefix",
    "key_tuple",
]


def key_tuple(key: NestedKey) -> tuple[str, ...]:
    """Returns ``key`` as a flat tuple of strings (``"a"`` -> ``("a",)``).

    Examples:
        >>> key_tuple(("agents", ("obs",)))
        ('agents', 'obs')
    """
    if isinstance(key, str):
        return (key,)
    out: list[str] = []
    for k in key:
        out.extend(key_tuple(k))
    return tuple(out)


def as_key(key: NestedKey) -> NestedKey:
    """Normalises a key the way tensordict does: one level -> ``str``, deeper -> flat tuple.

    Examples:
        >>> as_key(("done",)), as_key(("agents", "done"))
        ('done', ('agents', 'done'))
    """
    t = key_tuple(key)
    return t[0] if len(t) == 1 else t


def key_prefix(key: NestedKey) -> tuple[str, ...]:
    """The nesting prefix of ``key`` (everything but the leaf name).

    Examples:
        >>> key_prefix(("agents", "done")), key_prefix("done")
        (('agents',), ())
    """
    return key_tuple(key)[:-1]


def broadcast_mask(mask: torch.Tensor, batch_ndim: int, ndim: int) -> torch.Tensor:
    """Shapes a group mask so that it broadcasts against a leaf with ``ndim`` dims.

    A done leaf usually has a trailing singleton dim (``[*B, 1]`` or ``[*B, n_agents, 1]``); it is
    dropped (beyond the batch dims) and the mask is right-padded with singleton dims.

    Examples:
        >>> broadcast_mask(torch.ones(4, 3, 1, dtype=torch.bool), 1, 3).shape
        torch.Size([4, 3, 1])
        >>> broadcast_mask(torch.ones(4, 1, dtype=torch.bool), 1, 2).shape
        torch.Size([4, 1])
    """
    while mask.ndim > batch_ndim and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if mask.ndim > ndim:
        mask = mask.flatten(ndim - 1).any(-1) if ndim > 0 else mask.any()
    if mask.ndim < ndim:
        mask = mask.reshape(*mask.shape, *([1] * (ndim - mask.ndim)))
    return mask


class DoneGroup:
    """One done group: the node of the done spec that holds a ``done`` leaf.

    Attributes:
        prefix: the nesting prefix, ``()`` for the root group.
        done: the ``done`` key. terminated: the ``terminated`` key. truncated: the ``truncated``
            key or ``None`` when the group has none. reset: the ``_reset`` key of the group.
    """

    __slots__ = ("done", "prefix", "reset", "reset_path", "terminated", "truncated")

    def __init__(self, prefix: tuple[str, ...], has_truncated: bool) -> None:
        self.prefix = prefix
        self.done: Any = as_key((*prefix, "done"))
        self.terminated: Any = as_key((*prefix, "terminated"))
        self.truncated: Any = as_key((*prefix, "truncated")) if has_truncated else None
        self.reset: Any = as_key((*prefix, "_reset"))
        self.reset_path = (*prefix, "_reset")

    def __repr__(self) -> str:
        return f"DoneGroup(prefix={self.prefix})"

    @staticmethod
    def from_done_keys(done_keys: Iterable[NestedKey]) -> list[DoneGroup]:
        """Groups done leaves by their prefix; the root group (if any) comes first.

        A group exists wherever a ``done`` or ``terminated`` leaf exists.

        Examples:
            >>> DoneGroup.from_done_keys(["done", "terminated", ("a", "done"), ("a", "terminated")])
            [DoneGroup(prefix=()), DoneGroup(prefix=('a',))]
        """
        leaves: dict[tuple[str, ...], set[str]] = {}
        for key in done_keys:
            t = key_tuple(key)
            leaves.setdefault(t[:-1], set()).add(t[-1])
        groups = [
            DoneGroup(prefix, "truncated" in names)
            for prefix, names in leaves.items()
            if "done" in names or "terminated" in names
        ]
        groups.sort(key=lambda g: (len(g.prefix), g.prefix))
        return groups


def owning_group(key: NestedKey, prefixes: Sequence[tuple[str, ...]]) -> int:
    """Index of the deepest group prefix that contains ``key`` (-1 when none does)."""
    t = key_tuple(key)
    best, best_len = -1, -1
    for i, p in enumerate(prefixes):
        if len(p) < len(t) and t[: len(p)] == p and len(p) > best_len:
            best, best_len = i, len(p)
    return best
