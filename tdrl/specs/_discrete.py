"""Discrete specs: Categorical, OneHot, Binary, and the mask handling they share."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tdrl.specs._base import TensorSpec
from tdrl.specs._space import CategoricalBox
from tdrl.specs._utils import (
    DeviceLike,
    ShapeLike,
    as_shape,
    leaf_device,
    nearest_allowed,
    read_indices,
    refuse_register,
    sample_allowed,
    to_index,
)

__all__ = ["Binary", "Categorical", "OneHot"]


def _is_binary(x: torch.Tensor) -> bool:
    if x.dtype is torch.bool:
        return True
    return bool(((x == 0) | (x == 1)).all())


def _binary_tensor(x: torch.Tensor) -> torch.Tensor:
    """``_is_binary`` as a 0-d bool tensor (no device sync)."""
    if x.dtype is torch.bool:
        return torch.ones((), dtype=torch.bool, device=x.device)
    return ((x == 0) | (x == 1)).all()


class _MaskedSpec(TensorSpec):
    """A discrete spec with an optional boolean ``mask`` (True = allowed)."""

    _domain_tensors = ("mask",)
    mask: torch.Tensor | None

    def _mask_shape(self) -> torch.Size:
        raise NotImplementedError

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Sets the mask of allowed values (``None`` clears it).

        The mask must be boolean and broadcast to the spec's mask shape; it is stored as a view,
        so updating it every step costs no copy.

        Raises:
            TypeError: the mask is not boolean.
            ValueError: the mask shape does not broadcast to the spec's mask shape.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> spec = Categorical(3, shape=(2,))
            >>> spec.update_mask(torch.tensor([False, True, False]))
            >>> spec.rand().tolist()
            [1, 1]
        """
        name = type(self).__name__
        if mask is None:
            self.mask = None
            return
        mask = torch.as_tensor(mask)
        if mask.dtype is not torch.bool:
            raise TypeError(
                f"{name}.update_mask: the mask must be boolean (got {mask.dtype}; expected"
                " torch.bool). Pass mask.bool()."
            )
        target = self._mask_shape()
        try:
            self.mask = mask.to(self.device).expand(target)
        except RuntimeError as err:
            raise ValueError(
                f"{name}.update_mask: the mask shape does not broadcast to the spec's mask shape"
                f" (got {tuple(mask.shape)}; expected a shape broadcastable to {tuple(target)})."
                " Pass a mask of the spec's mask shape."
            ) from err

    def _allowed(self, lead: torch.Size) -> torch.Tensor | None:
        """The mask expanded with extra leading dims ``lead`` (``None`` when unmasked)."""
        if self.mask is None:
            return None
        return self.mask.expand(*lead, *self.mask.shape)

    def _repr_mask(self) -> list[str]:
        return [] if self.mask is None else ["masked=True"]


class Categorical(_MaskedSpec):
    """An integer index in ``[0, n)``, one per element of ``shape``.

    With ``dtype=torch.bool`` and ``n=2`` it describes boolean flags (tdrl uses this for done
    leaves): ``rand`` draws random bools and ``zero`` is all False.

    Args:
        n: number of categories.
        shape: the spec shape (one index per element; ``None``: ``()``).
        device: where values live (default CPU).
        dtype: an integer dtype, or ``torch.bool`` when ``n == 2``.
        mask: optional boolean mask of shape broadcastable to ``(*shape, n)``; True = allowed.

    Examples:
        >>> spec = Categorical(4, shape=(2,))
        >>> spec.update_mask(torch.tensor([[True, False, False, False], [False, False, False, True]]))
        >>> spec.rand().tolist()
        [0, 3]
        >>> spec.is_in(torch.tensor([0, 2]))
        tensor(False)
    """

    def __init__(
        self,
        n: int,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.int64,
        mask: torch.Tensor | None = None,
    ) -> None:
        if dtype is torch.bool and n != 2:
            raise ValueError(
                f"Categorical.__init__: a boolean Categorical needs n == 2 (got n={n}; expected 2)."
                " Use an integer dtype for more categories."
            )
        if dtype.is_floating_point:
            raise TypeError(
                f"Categorical.__init__: dtype must be integer or bool (got {dtype}; expected e.g."
                " torch.int64). Use Bounded for float values."
            )
        super().__init__(shape, leaf_device(device), dtype)
        self.n = int(n)
        self.mask = None
        self.update_mask(mask)

    @property
    def space(self) -> CategoricalBox:
        """``CategoricalBox(n)``: the categories of one value (TorchRL's space).

        Examples:
            >>> Categorical(3).space.n
            3
        """
        return CategoricalBox(self.n)

    def _mask_shape(self) -> torch.Size:
        return torch.Size((*self.shape, self.n))

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform indices among the allowed categories.

        Examples:
            >>> Categorical(2, shape=(3,), dtype=torch.bool).rand().dtype
            torch.bool
        """
        full = self._full_shape(shape)
        allowed = self._allowed(as_shape(shape))
        if allowed is not None:
            return sample_allowed(allowed, "Categorical.rand").to(self.dtype)
        if self.dtype is torch.bool:
            return torch.randint(0, 2, full, device=self.device).bool()
        return torch.randint(0, self.n, full, dtype=self.dtype, device=self.device)

    def _in_range(self, x: torch.Tensor) -> bool:
        return x.dtype is torch.bool or bool(((x >= 0) & (x < self.n)).all())

    def _in_domain(self, x: torch.Tensor) -> bool:
        if not self._in_range(x):
            return False
        if self.mask is None:
            return True
        allowed = self.mask.expand(*x.shape, self.n)
        return bool(allowed.gather(-1, x.long().unsqueeze(-1)).all())

    def _in_domain_tensor(self, x: torch.Tensor) -> torch.Tensor:
        if self.mask is not None:  # the mask lookup needs the range check first (one sync)
            return torch.tensor(self._in_domain(x), device=x.device)
        if x.dtype is torch.bool:
            return torch.ones((), dtype=torch.bool, device=x.device)
        return ((x >= 0) & (x < self.n)).all()

    def _describe_violation(self, x: torch.Tensor) -> str:
        if not self._in_range(x):
            return f"is out of range (got min {x.min().item()}, max {x.max().item()}"
        return "holds masked values (got a value whose mask entry is False"

    def _domain_text(self) -> str:
        masked = " allowed by the mask" if self.mask is not None else ""
        return f"integers in [0, {self.n - 1}]{masked}"

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Rounds and clamps ``val`` to ``[0, n)``; with a mask, moves to the closest allowed index.

        Examples:
            >>> spec = Categorical(4, mask=torch.tensor([True, False, False, True]))
            >>> spec.project(torch.tensor([1, 2, 7])).tolist()
            [0, 3, 3]
        """
        idx = to_index(val)
        allowed = None if self.mask is None else self.mask.expand(*idx.shape, self.n)
        if allowed is None:
            return idx.clamp(0, self.n - 1).to(self.dtype)
        return nearest_allowed(idx, allowed).to(self.dtype)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """One-hot (bool) encoding of indices ``val``: shape ``(*val.shape, n)``.

        Examples:
            >>> Categorical(3).to_one_hot(torch.tensor(1)).tolist()
            [False, True, False]
        """
        if safe:  # TorchRL: check the value against the spec first
            self.assert_is_in(val)
        return F.one_hot(val.long(), self.n).bool()

    def to_one_hot_spec(self) -> OneHot:
        """The matching :class:`OneHot` spec (mask included).

        Examples:
            >>> Categorical(3, shape=(2,)).to_one_hot_spec().shape
            torch.Size([2, 3])
        """
        return OneHot(self.n, shape=(*self.shape, self.n), device=self.device, mask=self.mask)

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Returns ``val``: it is already categorical (checked first when ``safe``).

        Examples:
            >>> Categorical(3).to_categorical(torch.tensor(2)).item()
            2
        """
        if safe:
            self.assert_is_in(val)
        return val

    def to_categorical_spec(self) -> Categorical:
        """Returns this spec (already categorical).

        Examples:
            >>> spec = Categorical(3)
            >>> spec.to_categorical_spec() is spec
            True
        """
        return self

    def cardinality(self) -> int:
        """Number of distinct values of one element.

        Examples:
            >>> Categorical(5).cardinality()
            5
        """
        return self.n

    def _eq_extra(self, other: Any) -> bool:
        return bool(self.n == other.n)

    def _repr_domain(self) -> list[str]:
        return [f"n={self.n}", *self._repr_mask()]


class OneHot(_MaskedSpec):
    """One-hot vectors: the last dim has size ``n`` and exactly one True entry.

    Args:
        n: number of categories.
        shape: the spec shape, ending with ``n`` (default ``(n,)``).
        device: where values live (default CPU).
        dtype: value dtype (bool by default; integer dtypes hold 0/1).
        use_register: only False (TorchRL's value register is not supported).
        mask: optional boolean mask broadcastable to ``shape``; True = allowed.

    Examples:
        >>> spec = OneHot(3, mask=torch.tensor([False, False, True]))
        >>> spec.rand().tolist()
        [False, False, True]
        >>> spec.to_categorical(spec.rand()).item()
        2
    """

    _event_ndim = 1

    def __init__(
        self,
        n: int,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.bool,
        use_register: bool = False,
        mask: torch.Tensor | None = None,
    ) -> None:
        refuse_register("OneHot", use_register)
        full = torch.Size((n,)) if shape is None else as_shape(shape)
        if len(full) == 0 or full[-1] != n:
            raise ValueError(
                f"OneHot.__init__: the last dim must equal n (got shape {tuple(full)}, n={n};"
                f" expected shape (..., {n})). Fix shape or n."
            )
        super().__init__(full, leaf_device(device), dtype)
        self.n = int(n)
        self.mask = None
        self.update_mask(mask)

    @property
    def space(self) -> CategoricalBox:
        """``CategoricalBox(n)``: the categories of one value (TorchRL's space).

        Examples:
            >>> OneHot(3).space.n
            3
        """
        return CategoricalBox(self.n)

    def _mask_shape(self) -> torch.Size:
        return self.shape

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform one-hot vectors among the allowed categories.

        Examples:
            >>> OneHot(4).rand((5,)).sum(-1).tolist()
            [1, 1, 1, 1, 1]
        """
        full = self._full_shape(shape)
        allowed = self._allowed(as_shape(shape))
        if allowed is not None:
            idx = sample_allowed(allowed, "OneHot.rand")
        else:
            idx = torch.randint(0, self.n, full[:-1], device=self.device)
        return F.one_hot(idx, self.n).to(self.dtype)

    def _in_domain(self, x: torch.Tensor) -> bool:
        return bool(self._in_domain_tensor(x))

    def _in_domain_tensor(self, x: torch.Tensor) -> torch.Tensor:
        found = _binary_tensor(x) & (x.sum(-1) == 1).all()
        if self.mask is not None:
            found = found & ~(x.bool() & ~self.mask).any()
        return found

    def _describe_violation(self, x: torch.Tensor) -> str:
        if not _is_binary(x) or not bool((x.sum(-1) == 1).all()):
            return f"is not one-hot (got row sums {x.sum(-1).unique().tolist()}"
        return "holds masked values (got a True entry where the mask is False"

    def _domain_text(self) -> str:
        masked = " on allowed entries" if self.mask is not None else ""
        return f"exactly one True per row of size {self.n}{masked}"

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """The one-hot encoding of categorical indices (TorchRL): shape ``(*val.shape, n)``.

        A gym ``Discrete`` value (an index) becomes this spec's one-hot vector. Use
        :meth:`to_numpy` for the way back.

        Raises:
            SpecError: a value is not an integer in ``[0, n)``.

        Examples:
            >>> OneHot(3).encode(2).tolist()
            [False, False, True]
            >>> OneHot(3, dtype=torch.int64).encode([0, 1]).tolist()
            [[1, 0, 0], [0, 1, 0]]
        """
        device = None if ignore_device else self.device
        idx = read_indices(val, self.n, device, "OneHot.encode")
        return F.one_hot(idx, self.n).to(self.dtype)

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """The categorical indices of one-hot values, as a numpy array (TorchRL).

        Examples:
            >>> OneHot(3).to_numpy(torch.tensor([False, False, True]))
            array(2)
        """
        if safe:
            self.assert_is_in(val)
        return val.long().argmax(-1).cpu().numpy()

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """The one-hot vector of the largest allowed entry of ``val``.

        Examples:
            >>> OneHot(3).project(torch.tensor([0.2, 0.9, 0.1])).tolist()
            [False, True, False]
        """
        scores = val.to(torch.float32)
        if self.mask is not None:
            scores = scores.masked_fill(~self.mask, float("-inf"))
        return F.one_hot(scores.argmax(-1), self.n).to(self.dtype)

    def to_categorical(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Indices of the True entries: shape ``val.shape[:-1]``.

        Examples:
            >>> OneHot(3).to_categorical(torch.tensor([False, False, True])).item()
            2
        """
        if safe:  # TorchRL: check the value against the spec first
            self.assert_is_in(val)
        return val.to(torch.uint8).argmax(-1)

    def to_categorical_spec(self) -> Categorical:
        """The matching :class:`Categorical` spec (mask included).

        Examples:
            >>> OneHot(3, shape=(2, 3)).to_categorical_spec().shape
            torch.Size([2])
        """
        return Categorical(self.n, shape=self.shape[:-1], device=self.device, mask=self.mask)

    def to_one_hot(self, val: torch.Tensor, safe: bool | None = None) -> torch.Tensor:
        """Returns ``val``: it is already one-hot (checked first when ``safe``).

        Examples:
            >>> OneHot(2).to_one_hot(torch.tensor([True, False])).tolist()
            [True, False]
        """
        if safe:
            self.assert_is_in(val)
        return val

    def to_one_hot_spec(self) -> OneHot:
        """Returns this spec (already one-hot).

        Examples:
            >>> spec = OneHot(3)
            >>> spec.to_one_hot_spec() is spec
            True
        """
        return self

    def cardinality(self) -> int:
        """Number of distinct values of one one-hot vector.

        Examples:
            >>> OneHot(5).cardinality()
            5
        """
        return self.n

    def _eq_extra(self, other: Any) -> bool:
        return bool(self.n == other.n)

    def _repr_domain(self) -> list[str]:
        return [f"n={self.n}", *self._repr_mask()]


class Binary(TensorSpec):
    """Vectors of ``n`` independent 0/1 values (the last dim has size ``n``).

    Args:
        n: size of the last dim (inferred from ``shape`` when omitted).
        shape: the spec shape, ending with ``n`` (default ``(n,)``).
        device: where values live (default CPU).
        dtype: value dtype (int8 by default, as TorchRL; bool/float dtypes hold 0/1 too).

    Examples:
        >>> spec = Binary(4)
        >>> spec.rand().shape, spec.is_in(torch.tensor([1, 0, 1, 1], dtype=torch.int8))
        (torch.Size([4]), tensor(True))
    """

    _event_ndim = 1

    def __init__(
        self,
        n: int | None = None,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.int8,
    ) -> None:
        if shape is None and n is None:
            raise ValueError(
                "Binary.__init__: the size is unknown (got n=None and shape=None; expected at"
                " least one). Pass n or shape."
            )
        full = as_shape(shape) if shape is not None else torch.Size((int(n or 0),))
        if len(full) == 0 or (n is not None and full[-1] != n):
            raise ValueError(
                f"Binary.__init__: the last dim must equal n (got shape {tuple(full)}, n={n};"
                " expected shape (..., n)). Fix shape or n."
            )
        super().__init__(full, leaf_device(device), dtype)
        self.n = full[-1]

    @property
    def space(self) -> CategoricalBox:
        """``CategoricalBox(2)``: each entry is 0 or 1 (TorchRL's space).

        Examples:
            >>> Binary(3).space.n
            2
        """
        return CategoricalBox(2)

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Independent fair 0/1 draws.

        Examples:
            >>> Binary(3, dtype=torch.int8).rand((2,)).shape
            torch.Size([2, 3])
        """
        full = self._full_shape(shape)
        return torch.randint(0, 2, full, device=self.device).to(self.dtype)

    def _in_domain(self, x: torch.Tensor) -> bool:
        return _is_binary(x)

    def _in_domain_tensor(self, x: torch.Tensor) -> torch.Tensor:
        return _binary_tensor(x)

    def _describe_violation(self, x: torch.Tensor) -> str:
        return f"holds non-binary values (got {x.unique()[:8].tolist()}"

    def _domain_text(self) -> str:
        return "values in {0, 1}"

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Thresholds ``val`` at 0.5.

        Examples:
            >>> Binary(3).project(torch.tensor([0.2, 0.7, 3.0])).tolist()
            [0, 1, 1]
        """
        if val.dtype is torch.bool:
            return val.to(self.dtype)
        return (val > 0.5).to(self.dtype)

    def cardinality(self) -> int:
        """Number of distinct vectors: ``2 ** n``.

        Examples:
            >>> Binary(3).cardinality()
            8
        """
        return int(2**self.n)

    def _eq_extra(self, other: Any) -> bool:
        return bool(self.n == other.n)

    def _repr_domain(self) -> list[str]:
        return [f"n={self.n}"]
