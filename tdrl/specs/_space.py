"""The ``space`` of a spec: the set its values live in (TorchRL's box objects)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["BoxList", "CategoricalBox", "ContinuousBox", "full_range_box"]


@dataclass(frozen=True, repr=False)
class ContinuousBox:
    """Values between ``low`` and ``high`` (element-wise; both have the spec's shape).

    Examples:
        >>> from tdrl.specs import Bounded
        >>> box = Bounded(-1.0, 2.0, shape=(2,)).space
        >>> box.low.tolist(), box.high.tolist()
        ([-1.0, -1.0], [2.0, 2.0])
    """

    low: torch.Tensor
    high: torch.Tensor

    @property
    def device(self) -> torch.device:
        """Device of the bounds."""
        return self.low.device

    def __repr__(self) -> str:
        return f"ContinuousBox(shape={tuple(self.low.shape)}, dtype={self.low.dtype})"


@dataclass(frozen=True)
class CategoricalBox:
    """The integers ``0 .. n - 1`` (the categories of a Categorical, OneHot or Binary entry).

    Examples:
        >>> from tdrl.specs import OneHot
        >>> OneHot(4).space
        CategoricalBox(n=4)
    """

    n: int


@dataclass(frozen=True)
class BoxList:
    """One :class:`CategoricalBox` per sub-action (MultiCategorical, MultiOneHot).

    Examples:
        >>> from tdrl.specs import MultiCategorical
        >>> [b.n for b in MultiCategorical([2, 3]).space.boxes]
        [2, 3]
    """

    boxes: list[CategoricalBox]

    @classmethod
    def from_nvec(cls, nvec: Sequence[int]) -> BoxList:
        """A BoxList with one ``CategoricalBox(n)`` per ``n`` of ``nvec``."""
        return cls([CategoricalBox(int(n)) for n in nvec])


def full_range_box(
    shape: torch.Size, dtype: torch.dtype, device: torch.device | None
) -> ContinuousBox:
    """The box of an unbounded spec: the whole range of its dtype (as TorchRL reports it)."""
    low: float
    high: float
    if dtype is torch.bool:
        low, high = 0, 1
    else:
        info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
        low, high = info.min, info.max
    return ContinuousBox(
        torch.full(shape, low, dtype=dtype, device=device),
        torch.full(shape, high, dtype=dtype, device=device),
    )
