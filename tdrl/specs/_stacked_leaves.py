"""Stacked: a stack of leaf specs of one class whose shapes or domains differ."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tdrl.errors import SpecError
from tdrl.specs._base import TensorSpec
from tdrl.specs._utils import DeviceLike, ShapeLike, as_shape, norm_dim, shape_from_args

__all__ = ["Stacked"]


def _stacked_shape(specs: Sequence[TensorSpec], dim: int) -> torch.Size:
    """The common shape, ``-1`` where the specs differ, with ``len(specs)`` inserted at ``dim``."""
    first = specs[0].shape
    shape = [n if all(s.shape[i] == n for s in specs) else -1 for i, n in enumerate(first)]
    shape.insert(dim, len(specs))
    return torch.Size(shape)


class Stacked(TensorSpec):
    """A stack of leaf specs of one class, dtype and device whose shapes or domains differ.

    ``torch.stack`` on leaves that cannot merge into one leaf (different shapes, ``n`` or
    ``nvec``) gives a ``Stacked`` (as in TorchRL). Dims where the shapes differ are ``-1``.
    Values are a dense ``torch.stack`` of the samples when their shapes agree, else a nested
    tensor (``torch.nested``), which only stacks along dim 0 without extra leading dims.

    Args:
        *specs: the leaf specs (one class, dtype, device and number of dims).
        dim: the stack dim, within ``0 .. ndim`` (keyword-only, as TorchRL).

    Examples:
        >>> from tdrl.specs import Unbounded
        >>> spec = torch.stack([Unbounded(shape=(3,)), Unbounded(shape=(5,))], 0)
        >>> spec.shape
        torch.Size([2, -1])
        >>> value = spec.rand()
        >>> [v.shape for v in value.unbind(0)], spec.is_in(value)
        ([torch.Size([3]), torch.Size([5])], True)
    """

    def __init__(self, *specs: TensorSpec, dim: int) -> None:
        if len(specs) == 1 and isinstance(specs[0], (list, tuple)):
            specs = tuple(specs[0])
        _check_leaves(specs)
        d = norm_dim(dim, specs[0].ndim + 1, "Stacked.__init__")
        super().__init__(_stacked_shape(specs, d), specs[0].device, specs[0].dtype)
        self.specs = list(specs)
        self.dim = d

    @property
    def stack_dim(self) -> int:
        """The stack dim (TorchRL's name for :attr:`dim`)."""
        return self.dim

    @property
    def space(self) -> Any:
        """Not defined for a stack of different domains (TorchRL neither)."""
        raise NotImplementedError(
            "Stacked.space: a stack of different specs has no single space (got"
            f" {len(self.specs)} specs; expected one). Read spec.specs[i].space instead."
        )

    # ------------------------------------------------------------------ values
    def _gather(self, parts: list[torch.Tensor], lead: int) -> torch.Tensor:
        if all(p.shape == parts[0].shape for p in parts):
            return torch.stack(parts, lead + self.dim)
        if lead + self.dim != 0:
            raise NotImplementedError(
                f"Stacked: values of different shapes stack as a nested tensor along dim 0"
                f" only (got stack dim {lead + self.dim}; expected 0). Draw per spec:"
                " [s.rand() for s in spec.specs]."
            )
        with warnings.catch_warnings():  # torch warns that nested tensors are a prototype
            warnings.simplefilter("ignore", UserWarning)
            return torch.nested.nested_tensor(parts)

    def _make(self, method: str, shape: ShapeLike | None) -> torch.Tensor:
        parts = [getattr(s, method)(shape) for s in self.specs]
        return self._gather(parts, len(as_shape(shape)))

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """One random value per spec, stacked (see the class docstring).

        Examples:
            >>> from tdrl.specs import Categorical
            >>> spec = torch.stack([Categorical(2), Categorical(5)], 0)
            >>> spec.rand((4,)).shape
            torch.Size([4, 2])
        """
        return self._make("rand", shape)

    def zero(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """The stacked zeros of every spec."""
        return self._make("zero", shape)

    def one(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """The stacked ones of every spec."""
        return self._make("one", shape)

    def _parts(self, val: Any) -> list[Any] | None:
        if isinstance(val, (list, tuple)):
            parts = list(val)
        elif isinstance(val, torch.Tensor) and val.is_nested:
            parts = list(val.unbind(0)) if self.dim == 0 else []
        elif isinstance(val, torch.Tensor) and val.ndim >= self.ndim:
            parts = list(val.unbind(val.ndim - self.ndim + self.dim))
        else:
            return None
        return parts if len(parts) == len(self.specs) else None

    def is_in(self, val: Any) -> bool:
        """Whether each slice of ``val`` along the stack dim is in its spec.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> spec = torch.stack([Categorical(2), Categorical(5)], 0)
            >>> spec.is_in(torch.tensor([1, 4])), spec.is_in(torch.tensor([4, 1]))
            (True, False)
        """
        parts = self._parts(val)
        return parts is not None and all(s.is_in(p) for s, p in zip(self.specs, parts))

    def _split(self, val: Any, key: Any, where: str) -> list[Any]:
        parts = self._parts(val)
        if parts is None:
            got = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
            raise SpecError(
                f"{where}: value{'' if key is None else f' for key {key!r}'} does not fit the"
                f" stack (got {got}; expected {len(self.specs)} values along dim {self.dim})."
                " Pass a stacked or nested tensor."
            )
        return parts

    def assert_is_in(self, value: Any, key: Any = None) -> None:
        """Raises a :class:`~tdrl.errors.SpecError` naming the stack element that fails.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> torch.stack([Categorical(2), Categorical(5)], 0).assert_is_in(torch.tensor([3, 0]))
            Traceback (most recent call last):
            ...
            tdrl.errors.SpecError: Stacked.assert_is_in: element 0 of dim 0: ...
        """
        for i, (s, p) in enumerate(
            zip(self.specs, self._split(value, key, "Stacked.assert_is_in"))
        ):
            try:
                s.assert_is_in(p, key)
            except SpecError as err:
                raise SpecError(
                    f"Stacked.assert_is_in: element {i} of dim {self.dim}: {err}"
                ) from err

    def type_check(self, value: Any, key: Any = None) -> None:
        """Raises ``TypeError`` if a slice along the stack dim has the wrong dtype."""
        for s, p in zip(self.specs, self._split(value, key, "Stacked.type_check")):
            s.type_check(p, key)

    def project(self, val: Any) -> torch.Tensor:
        """Each slice projected by its spec, stacked again.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> torch.stack([Categorical(2), Categorical(5)], 0).project(torch.tensor([7, 7])).tolist()
            [1, 4]
        """
        parts = self._split(val, None, "Stacked.project")
        lead = val.ndim - self.ndim if isinstance(val, torch.Tensor) and not val.is_nested else 0
        return self._gather([s.project(p) for s, p in zip(self.specs, parts)], lead)

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Encodes one value per spec (a list, or a tensor unbound along the stack dim).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(2,))], 0)
            >>> spec.encode([[1.0], [2.0, 3.0]]).is_nested
            True
        """
        if isinstance(val, np.ndarray):
            val = torch.as_tensor(val)
        parts = val if isinstance(val, (list, tuple)) else self._split(val, None, "Stacked.encode")
        encoded = [s.encode(v, ignore_device=ignore_device) for s, v in zip(self.specs, parts)]
        return self._gather(encoded, 0)

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """A numpy array (dense values) or a list of arrays (nested values)."""
        if safe:
            self.assert_is_in(val)
        if isinstance(val, torch.Tensor) and not val.is_nested:
            return val.detach().cpu().numpy()
        return [s.to_numpy(p) for s, p in zip(self.specs, self._split(val, None, "Stacked"))]

    # ------------------------------------------------------------------ structure
    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx: Any) -> TensorSpec:
        """``spec[i]`` (stack dim 0) or ``spec[:, i]`` (stack dim 1): the i-th spec.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(2,))], 0)[1].shape
            torch.Size([2])
        """
        full = (slice(None),) * self.dim
        if isinstance(idx, tuple) and idx[: self.dim] == full and len(idx) == self.dim + 1:
            idx = idx[-1]
        elif self.dim != 0:
            raise IndexError(
                f"Stacked.__getitem__: only the stack dim can be indexed (got {idx!r}; expected"
                f" an index at dim {self.dim}, full slices before it). Use spec.specs[i]."
            )
        if isinstance(idx, int):
            return self.specs[idx]
        if isinstance(idx, slice):
            return Stacked(*self.specs[idx], dim=self.dim)
        raise IndexError(
            f"Stacked.__getitem__: unsupported index (got {idx!r}; expected an int or a slice)."
            " Use spec.specs[i]."
        )

    def expand(self, *shape: Any) -> Stacked:
        """Prepends dims to every spec (the trailing dims must be ``self.shape``, ``-1`` kept).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> spec = torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(2,))], 0)
            >>> spec.expand(3, 2, -1).shape
            torch.Size([3, 2, -1])
        """
        new = shape_from_args(shape)
        lead = len(new) - self.ndim
        if lead < 0 or any(n not in (own, -1) for n, own in zip(new[lead:], self.shape)):
            raise ValueError(
                f"Stacked.expand: the trailing dims must equal the spec shape (got {tuple(new)};"
                f" expected (..., {', '.join(map(str, self.shape))})). Only prepend new dims."
            )
        specs = [s.expand(*new[:lead], *s.shape) for s in self.specs]
        return Stacked(*specs, dim=self.dim + lead)

    def unsqueeze(self, dim: int) -> Stacked:
        """Inserts a size-1 dim at ``dim`` (shifting the stack dim when needed)."""
        d = norm_dim(dim, self.ndim + 1, "Stacked.unsqueeze")
        if d <= self.dim:
            return Stacked(*[s.unsqueeze(d) for s in self.specs], dim=self.dim + 1)
        return Stacked(*[s.unsqueeze(d - 1) for s in self.specs], dim=self.dim)

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Removes size-1 dims other than a stack dim of several specs."""
        dims = [i for i, n in enumerate(self.shape) if n == 1]
        if dim is not None:
            d = norm_dim(dim, self.ndim, "Stacked.squeeze")
            dims = [d] if d in dims else []
        out: TensorSpec = self
        for d in reversed(dims):
            out = out._squeeze_one(d) if isinstance(out, Stacked) else out.squeeze(d)
        return out

    def _squeeze_one(self, d: int) -> TensorSpec:
        if d == self.dim:
            return self.specs[0]
        inner, shift = (d, 1) if d < self.dim else (d - 1, 0)
        return Stacked(*[s.squeeze(inner) for s in self.specs], dim=self.dim - shift)

    def to(self, dest: DeviceLike | torch.dtype) -> Stacked:
        """Every spec moved or cast."""
        return Stacked(*[s.to(dest) for s in self.specs], dim=self.dim)

    def clone(self) -> Stacked:
        """A deep copy."""
        return Stacked(*[s.clone() for s in self.specs], dim=self.dim)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stacked) or (self.dim, len(self.specs)) != (
            other.dim,
            len(other.specs),
        ):
            return False
        return all(a == b for a, b in zip(self.specs, other.specs))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(repr(s) for s in self.specs)
        return f"Stacked([{inner}], dim={self.dim}, shape={self.shape})"


def _check_leaves(specs: Sequence[TensorSpec]) -> None:
    if not specs or not all(isinstance(s, TensorSpec) and not hasattr(s, "keys") for s in specs):
        raise TypeError(
            f"Stacked.__init__: expected leaf specs (got {[type(s).__name__ for s in specs]};"
            " expected a non-empty list of leaf TensorSpecs). Stack Composites with"
            " torch.stack to get a StackedComposite."
        )
    first = specs[0]
    for s in specs[1:]:
        if (type(s), s.dtype, s.device, s.ndim) != (
            type(first),
            first.dtype,
            first.device,
            first.ndim,
        ):
            raise ValueError(
                f"Stacked.__init__: specs differ in class, dtype, device or number of dims (got"
                f" {s!r} and {first!r}; expected one class, dtype, device and ndim). Put them in"
                " Composites to get a StackedComposite."
            )
