"""Multi-discrete specs: MultiCategorical and MultiOneHot (one sub-action per entry of nvec)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tdrl.errors import SpecError
from tdrl.specs._discrete import _MaskedSpec
from tdrl.specs._space import BoxList
from tdrl.specs._utils import (
    DeviceLike,
    SegmentLayout,
    ShapeLike,
    as_shape,
    leaf_device,
    nearest_allowed,
    read_indices,
    refuse_register,
    sample_allowed,
    to_index,
)

__all__ = ["MultiCategorical", "MultiOneHot"]


def _as_nvec(nvec: Sequence[int] | torch.Tensor, where: str) -> tuple[int, ...]:
    values = nvec.tolist() if isinstance(nvec, torch.Tensor) else list(nvec)
    if not values or any(isinstance(v, list) or int(v) < 1 for v in values):
        raise ValueError(
            f"{where}: nvec must be a non-empty flat sequence of positive ints (got {values};"
            " expected e.g. [3, 2]). Fix nvec."
        )
    return tuple(int(v) for v in values)


class _MultiBase(_MaskedSpec):
    """Shared state of the multi-discrete specs: ``nvec`` and its padded layout."""

    _event_ndim = 1
    nvec: tuple[int, ...]
    _layout: SegmentLayout

    def _refresh(self) -> None:
        self._layout = SegmentLayout(self.nvec, self.device or torch.device("cpu"))

    def _padded_allowed(self, lead: torch.Size) -> torch.Tensor:
        """``[*lead, *batch, k, max_n]`` boolean table of allowed values per sub-action."""
        batch = self.shape[:-1]
        if self.mask is None:
            return self._layout.valid.expand(*lead, *batch, *self._layout.valid.shape)
        padded = self._layout.to_padded(self.mask, False)
        return padded.expand(*lead, *padded.shape)

    def cardinality(self) -> int:
        """Number of distinct joint values of one element: ``prod(nvec)``.

        Examples:
            >>> from tdrl.specs import MultiCategorical
            >>> MultiCategorical([3, 2]).cardinality()
            6
        """
        return math.prod(self.nvec)

    def _eq_extra(self, other: Any) -> bool:
        return bool(self.nvec == other.nvec)

    def _repr_domain(self) -> list[str]:
        return [f"nvec={list(self.nvec)}", *self._repr_mask()]


class MultiCategorical(_MultiBase):
    """Several categorical sub-actions: entry ``i`` of the last dim lies in ``[0, nvec[i])``.

    Args:
        nvec: number of categories of each sub-action.
        shape: the spec shape, ending with ``len(nvec)`` (default ``(len(nvec),)``).
        device: where values live (default CPU).
        dtype: integer value dtype.
        mask: optional boolean mask broadcastable to ``(*shape[:-1], sum(nvec))``, the
            sub-action masks laid end to end; True = allowed.
        remove_singleton: accepted for TorchRL compatibility; samples keep their
            ``len(nvec)`` dim even when it is 1 (tdrl never squeezes it).

    Examples:
        >>> spec = MultiCategorical([3, 2])
        >>> spec.update_mask(torch.tensor([False, False, True, True, False]))
        >>> spec.rand().tolist()
        [2, 0]
        >>> spec.is_in(torch.tensor([2, 1]))
        False
    """

    def __init__(
        self,
        nvec: Sequence[int] | torch.Tensor,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.int64,
        mask: torch.Tensor | None = None,
        remove_singleton: bool = True,
    ) -> None:
        self.nvec = _as_nvec(nvec, "MultiCategorical.__init__")
        full = torch.Size((len(self.nvec),)) if shape is None else as_shape(shape)
        if len(full) == 0 or full[-1] != len(self.nvec):
            raise ValueError(
                f"MultiCategorical.__init__: the last dim must equal len(nvec) (got shape"
                f" {tuple(full)}; expected (..., {len(self.nvec)})). Fix shape or nvec."
            )
        super().__init__(full, leaf_device(device), dtype)
        self._refresh()
        self.mask = None
        self.update_mask(mask)

    @property
    def space(self) -> BoxList:
        """One ``CategoricalBox(n)`` per sub-action (TorchRL's space).

        Examples:
            >>> [box.n for box in MultiCategorical([2, 4]).space.boxes]
            [2, 4]
        """
        return BoxList.from_nvec(self.nvec)

    def _mask_shape(self) -> torch.Size:
        return torch.Size((*self.shape[:-1], sum(self.nvec)))

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform allowed values for every sub-action.

        Examples:
            >>> MultiCategorical([3, 2], shape=(4, 2)).rand((5,)).shape
            torch.Size([5, 4, 2])
        """
        full = self._full_shape(shape)
        if self.mask is None:
            u = torch.rand(full, device=self.device)
            idx = (u * self._layout.nvec_t).floor().long()
            return torch.minimum(idx, self._layout.nvec_t - 1).to(self.dtype)
        allowed = self._padded_allowed(as_shape(shape))
        return sample_allowed(allowed, "MultiCategorical.rand").to(self.dtype)

    def _in_range(self, x: torch.Tensor) -> bool:
        return bool(((x >= 0) & (x < self._layout.nvec_t)).all())

    def _in_domain(self, x: torch.Tensor) -> bool:
        if not self._in_range(x):
            return False
        if self.mask is None:
            return True
        flat = x.long() + self._layout.offsets
        allowed = self.mask.expand(*x.shape[:-1], self.mask.shape[-1])
        return bool(allowed.gather(-1, flat).all())

    def _describe_violation(self, x: torch.Tensor) -> str:
        if not self._in_range(x):
            return f"is out of range (got min {x.min().item()}, max {x.max().item()}"
        return "holds masked values (got a sub-action whose mask entry is False"

    def _domain_text(self) -> str:
        masked = " allowed by the mask" if self.mask is not None else ""
        return f"entry i in [0, nvec[i]) with nvec={list(self.nvec)}{masked}"

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Moves every sub-action to its closest allowed value.

        Examples:
            >>> MultiCategorical([3, 2]).project(torch.tensor([5, -1])).tolist()
            [2, 0]
        """
        idx = to_index(val)
        allowed = self._padded_allowed(idx.shape[: idx.ndim - self.ndim])
        return nearest_allowed(idx, allowed).to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Concatenated one-hot encoding: shape ``(*val.shape[:-1], sum(nvec))``.

        Examples:
            >>> MultiCategorical([2, 3]).to_one_hot(torch.tensor([1, 0])).long().tolist()
            [0, 1, 1, 0, 0]
        """
        if safe:  # TorchRL: check the value against the spec first
            self.assert_is_in(val)
        out = torch.zeros(*val.shape[:-1], sum(self.nvec), dtype=torch.bool, device=val.device)
        pos = val.long() + self._layout.offsets
        return out.scatter_(-1, pos, True)

    def to_one_hot_spec(self) -> MultiOneHot:
        """The matching :class:`MultiOneHot` spec (mask included).

        Examples:
            >>> MultiCategorical([2, 3]).to_one_hot_spec().shape
            torch.Size([5])
        """
        shape = (*self.shape[:-1], sum(self.nvec))
        return MultiOneHot(self.nvec, shape=shape, device=self.device, mask=self.mask)

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Returns ``val``: it is already categorical (checked first when ``safe``).

        Examples:
            >>> MultiCategorical([2, 3]).to_categorical(torch.tensor([1, 2])).tolist()
            [1, 2]
        """
        if safe:
            self.assert_is_in(val)
        return val

    def to_categorical_spec(self) -> MultiCategorical:
        """Returns this spec (already categorical).

        Examples:
            >>> spec = MultiCategorical([2, 3])
            >>> spec.to_categorical_spec() is spec
            True
        """
        return self


class MultiOneHot(_MultiBase):
    """Several one-hot sub-actions laid end to end along the last dim (size ``sum(nvec)``).

    Args:
        nvec: number of categories of each sub-action.
        shape: the spec shape, ending with ``sum(nvec)`` (default ``(sum(nvec),)``).
        device: where values live (default CPU).
        dtype: value dtype (bool by default).
        use_register: only False (TorchRL's value register is not supported).
        mask: optional boolean mask broadcastable to ``shape``; True = allowed.

    Examples:
        >>> spec = MultiOneHot([2, 3])
        >>> spec.is_in(torch.tensor([True, False, False, False, True]))
        True
        >>> spec.to_categorical(torch.tensor([True, False, False, False, True])).tolist()
        [0, 2]
    """

    def __init__(
        self,
        nvec: Sequence[int] | torch.Tensor,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.bool,
        use_register: bool = False,
        mask: torch.Tensor | None = None,
    ) -> None:
        refuse_register("MultiOneHot", use_register)
        self.nvec = _as_nvec(nvec, "MultiOneHot.__init__")
        total = sum(self.nvec)
        full = torch.Size((total,)) if shape is None else as_shape(shape)
        if len(full) == 0 or full[-1] != total:
            raise ValueError(
                f"MultiOneHot.__init__: the last dim must equal sum(nvec) (got shape"
                f" {tuple(full)}; expected (..., {total})). Fix shape or nvec."
            )
        super().__init__(full, leaf_device(device), dtype)
        self._refresh()
        self.mask = None
        self.update_mask(mask)

    @property
    def space(self) -> BoxList:
        """One ``CategoricalBox(n)`` per sub-action (TorchRL's space).

        Examples:
            >>> [box.n for box in MultiOneHot([2, 4]).space.boxes]
            [2, 4]
        """
        return BoxList.from_nvec(self.nvec)

    def _mask_shape(self) -> torch.Size:
        return self.shape

    def _encode(self, idx: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(*idx.shape[:-1], sum(self.nvec), dtype=self.dtype, device=idx.device)
        ones = torch.ones(idx.shape, dtype=self.dtype, device=idx.device)
        return out.scatter_(-1, idx + self._layout.offsets, ones)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform allowed one-hot blocks.

        Examples:
            >>> MultiOneHot([2, 3]).rand((4,)).long().sum(-1).tolist()
            [2, 2, 2, 2]
        """
        allowed = self._padded_allowed(as_shape(shape))
        return self._encode(sample_allowed(allowed, "MultiOneHot.rand"))

    def _block_sums(self, x: torch.Tensor) -> torch.Tensor:
        return self._layout.to_padded(x.to(torch.int64), 0).sum(-1)

    def _in_domain(self, x: torch.Tensor) -> bool:
        if x.dtype is not torch.bool and not bool(((x == 0) | (x == 1)).all()):
            return False
        if not bool((self._block_sums(x) == 1).all()):
            return False
        return self.mask is None or not bool((x.bool() & ~self.mask).any())

    def _describe_violation(self, x: torch.Tensor) -> str:
        sums = self._block_sums(x).unique().tolist()
        if sums != [1]:
            return f"is not one-hot per block (got block sums {sums}"
        return "holds masked values (got a True entry where the mask is False"

    def _domain_text(self) -> str:
        masked = " on allowed entries" if self.mask is not None else ""
        return f"one True per block of sizes {list(self.nvec)}{masked}"

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """The one-hot blocks of per-sub-action indices (TorchRL): the last dim of ``val``
        holds one index per entry of ``nvec`` (a gym ``MultiDiscrete`` value).

        Raises:
            SpecError: an index is not an integer in ``[0, nvec[i])``.

        Examples:
            >>> MultiOneHot([2, 3]).encode([1, 0]).tolist()
            [False, True, True, False, False]
        """
        shape = tuple(val.shape) if hasattr(val, "shape") else np.shape(val)
        if len(shape) == 0 or shape[-1] != len(self.nvec):
            raise SpecError(
                f"MultiOneHot.encode: one index per sub-action is needed (got shape "
                f"{tuple(shape)}; expected (..., {len(self.nvec)})). Pass indices shaped "
                "like the MultiCategorical of this spec."
            )
        device = None if ignore_device else self.device
        idx = read_indices(val, self._layout.nvec_t, device, "MultiOneHot.encode")
        out = torch.zeros(*idx.shape[:-1], sum(self.nvec), dtype=self.dtype, device=idx.device)
        ones = torch.ones(idx.shape, dtype=self.dtype, device=idx.device)
        return out.scatter_(-1, idx + self._layout.offsets.to(idx.device), ones)

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """The per-sub-action indices, as a numpy array (TorchRL).

        Examples:
            >>> MultiOneHot([2, 3]).to_numpy(torch.tensor([False, True, True, False, False]))
            array([1, 0])
        """
        if safe:
            self.assert_is_in(val)
        return self.to_categorical(val).cpu().numpy()

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Keeps the largest allowed entry of every block.

        Examples:
            >>> MultiOneHot([2, 2]).project(torch.tensor([0.3, 0.1, 0.0, 0.0])).tolist()
            [True, False, True, False]
        """
        scores = self._layout.to_padded(val.to(torch.float32), float("-inf"))
        allowed = self._padded_allowed(val.shape[: val.ndim - self.ndim])
        scores = scores.masked_fill(~allowed, float("-inf"))
        return self._encode(scores.argmax(-1))

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Index of the True entry of every block: shape ``(*val.shape[:-1], len(nvec))``.

        Examples:
            >>> MultiOneHot([2, 3]).to_categorical(torch.tensor([0, 1, 0, 1, 0])).tolist()
            [1, 1]
        """
        if safe:  # TorchRL: check the value against the spec first
            self.assert_is_in(val)
        return self._layout.to_padded(val.to(torch.float32), float("-inf")).argmax(-1)

    def to_categorical_spec(self) -> MultiCategorical:
        """The matching :class:`MultiCategorical` spec (mask included).

        Examples:
            >>> MultiOneHot([2, 3]).to_categorical_spec().shape
            torch.Size([2])
        """
        shape = (*self.shape[:-1], len(self.nvec))
        return MultiCategorical(self.nvec, shape=shape, device=self.device, mask=self.mask)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Returns ``val``: it is already one-hot (checked first when ``safe``).

        Examples:
            >>> MultiOneHot([1, 2]).to_one_hot(torch.tensor([True, False, True])).tolist()
            [True, False, True]
        """
        if safe:
            self.assert_is_in(val)
        return val

    def to_one_hot_spec(self) -> MultiOneHot:
        """Returns this spec (already one-hot).

        Examples:
            >>> spec = MultiOneHot([2, 3])
            >>> spec.to_one_hot_spec() is spec
            True
        """
        return self
