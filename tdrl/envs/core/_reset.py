"""Partial-reset plumbing: read ``_reset`` masks and merge reset output into the old data."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core._fast import lookup
from tdrl.envs.core._keys import DoneGroup, broadcast_mask, key_tuple, owning_group

__all__ = ["ResetPlan"]


class ResetPlan:
    """Precomputed knowledge of how ``_reset`` masks map onto an env's entries.

    Each leaf of the reset output belongs to the deepest done group whose prefix contains it; a
    root ``_reset`` also applies to every nested group.
    """

    def __init__(
        self, groups: Sequence[DoneGroup], batch_ndim: int, done_shapes: Sequence[torch.Size]
    ) -> None:
        self.groups = list(groups)
        self.batch_ndim = batch_ndim
        self.done_shapes = [torch.Size(s) for s in done_shapes]
        self._prefixes = [g.prefix for g in self.groups]
        self._root = next((i for i, g in enumerate(self.groups) if g.prefix == ()), None)
        self._owner_cache: dict[NestedKey, int] = {}
        self._paths = [key_tuple(g.reset) for g in self.groups]
        # every group at the root: no nested _reset entry to strip or broadcast to
        self.flat = all(not g.prefix for g in self.groups)

    def masks(self, td: TensorDictBase | None) -> list[torch.Tensor | None] | None:
        """Per-group masks from the ``_reset`` entries of ``td``; ``None`` means reset everything.

        A root ``_reset`` is OR-ed into the nested groups. A group without an entry (and no root
        entry) is not reset.
        """
        if td is None:
            return None
        raw: list[torch.Tensor | None] = [
            self._shaped(lookup(td, path), shape)
            for path, shape in zip(self._paths, self.done_shapes)
        ]
        root_reset = lookup(td, ("_reset",))
        if root_reset is None:
            return None if all(m is None for m in raw) else raw
        root_b = None
        for i, m in enumerate(raw):
            if i == self._root and m is not None:
                continue  # the root group's own mask is the root _reset
            if root_b is None:
                root_b = broadcast_mask(root_reset, self.batch_ndim, self.batch_ndim)
            shape = self.done_shapes[i]
            r = root_b.reshape(*root_b.shape, *([1] * (len(shape) - root_b.ndim))).expand(shape)
            raw[i] = r if m is None else (m | r)
        return raw

    @staticmethod
    def _shaped(mask: torch.Tensor | None, shape: torch.Size) -> torch.Tensor | None:
        # A mask without the done leaf's trailing singleton dim ([B] for a [B, 1] done).
        if mask is not None and mask.shape != shape and mask.numel() == shape.numel():
            return mask.reshape(shape)
        return mask

    def owner(self, key: NestedKey) -> int:
        """Index of the group that owns ``key`` (the root group, or -1, when none is deeper)."""
        found = self._owner_cache.get(key)
        if found is None:
            found = owning_group(key, self._prefixes)
            if found < 0 and self._root is not None:
                found = self._root
            self._owner_cache[key] = found
        return found

    def any_reset(self, masks: list[torch.Tensor | None]) -> torch.Tensor | None:
        """Batch-shaped mask of the envs where any group resets."""
        out = None
        for m in masks:
            if m is None:
                continue
            b = broadcast_mask(m, self.batch_ndim, self.batch_ndim)
            if b.ndim > self.batch_ndim:
                b = b.flatten(self.batch_ndim).any(-1)
            out = b if out is None else out | b
        return out

    def merge(
        self, old: TensorDictBase, new: TensorDictBase, masks: list[torch.Tensor | None]
    ) -> TensorDictBase:
        """Writes into ``old`` the values of ``new`` where the owning group resets.

        Entries owned by a group that does not reset keep their old value; keys that ``old``
        lacks are taken from ``new`` as they are. Returns ``old``.
        """
        batch_mask: torch.Tensor | None = None
        for key in new.keys(True, True):
            value = new.get(key)
            prev = old.get(key, None)
            if prev is None or not isinstance(value, torch.Tensor):
                old.set(key, value)
                continue
            gi = self.owner(key)
            if gi >= 0:
                mask = masks[gi]
                if mask is None:
                    continue
            else:
                if batch_mask is None:
                    batch_mask = self.any_reset(masks)
                mask = batch_mask
            if mask is None:
                continue
            if prev.shape != value.shape:
                old.set(key, value)
                continue
            m = broadcast_mask(mask, self.batch_ndim, value.ndim)
            old.set(key, torch.where(m, value, prev))
        return old

    def base(self, td: TensorDictBase) -> TensorDictBase:
        """A shallow copy of a partial-reset input without ``"next"`` and ``_reset`` entries.

        For a plain input of an env whose groups are all at the root, one dict comprehension
        (``exclude`` and ``pop`` cost ten times more); nested nodes are shared either way.
        """
        if self.flat and type(td) is TensorDict and not td._has_names():
            kept = {k: v for k, v in td._tensordict.items() if k != "next" and k != "_reset"}
            return TensorDict._new_unsafe(
                kept, batch_size=td._batch_size, device=td._device, nested=False
            )
        out = td.exclude("next")
        ResetPlan.strip(out, self.groups)
        return out

    @staticmethod
    def strip(td: TensorDictBase, groups: Sequence[DoneGroup]) -> None:
        """Removes every ``_reset`` entry from ``td`` in place."""
        for g in groups:
            td.pop(g.reset, None)
        td.pop("_reset", None)
