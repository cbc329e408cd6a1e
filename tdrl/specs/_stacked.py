"""Stacking specs: ``stack_specs`` / ``torch.stack`` and the heterogeneous ``StackedComposite``."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from tdrl.errors import SpecError
from tdrl.specs._base import TensorSpec
from tdrl.specs._composite import Composite, NestedKey, is_key
from tdrl.specs._stacked_leaves import Stacked
from tdrl.specs._utils import DeviceLike, ShapeLike, as_shape, norm_dim, shape_from_args

__all__ = ["StackedComposite", "stack_specs"]


def _insert(shape: torch.Size, dim: int, n: int) -> torch.Size:
    return torch.Size((*shape[:dim], n, *shape[dim:]))


def _stack_leaves(specs: list[TensorSpec], dim: int) -> TensorSpec | None:
    """Stacks equal-shaped leaves of one class (stacking low/high/mask); ``None`` if impossible."""
    first = specs[0]
    for s in specs[1:]:
        same = (type(s), s.shape, s.dtype, s.device) == (
            type(first),
            first.shape,
            first.dtype,
            first.device,
        )
        if not same or not first._eq_extra(s):
            return None
    if isinstance(first, Composite) or dim > first._index_ndim:
        return None
    out = copy.copy(first)
    out.shape = _insert(first.shape, dim, len(specs))
    for name in first._domain_tensors:
        tensors = [getattr(s, name) for s in specs]
        if all(t is None for t in tensors):
            continue
        # A spec without a mask allows everything: stack an all-True mask in its place.
        like = next(t for t in tensors if t is not None)
        tensors = [torch.ones_like(like) if t is None else t for t in tensors]
        setattr(out, name, torch.stack(tensors, dim))
    out._refresh()
    return out


def _stack_composites(specs: list[Composite], dim: int) -> Composite | None:
    """Stacks composites whose entries all stack; ``None`` when any entry differs."""
    first = specs[0]
    if any(s.shape != first.shape or set(s._specs) != set(first._specs) for s in specs):
        return None
    out = Composite(shape=_insert(first.shape, dim, len(specs)), device=first.device)
    for k in first._specs:
        children = [s._specs[k] for s in specs]
        if all(isinstance(c, Composite) for c in children):
            stacked: TensorSpec | None = _stack_composites(children, dim)  # type: ignore[arg-type]
        elif any(isinstance(c, (Composite, StackedComposite)) for c in children):
            stacked = None
        else:
            stacked = _stack_leaves(children, dim)
        if stacked is None:
            return None
        out._specs[k] = stacked
    return out


def _stackable(specs: list[TensorSpec]) -> bool:
    """Whether leaves can form a :class:`Stacked` (one class, dtype, device and ndim)."""
    first = specs[0]
    if hasattr(first, "keys"):
        return False
    key = (type(first), first.dtype, first.device, first.ndim)
    return all((type(s), s.dtype, s.device, s.ndim) == key for s in specs)


def stack_specs(specs: Sequence[TensorSpec], dim: int = 0) -> TensorSpec:
    """Stacks specs along a new batch dim ``dim`` (what ``torch.stack`` on specs calls).

    Equal leaves stack into one leaf (bounds and masks are stacked); leaves of one class, dtype
    and device whose shapes (or ``n``) differ give a :class:`Stacked`. Composites whose entries
    all stack give a plain :class:`Composite`; otherwise (entries of different shapes or
    classes, or different keys) a :class:`StackedComposite` keeps each composite as is.

    Args:
        specs: the specs to stack (all leaves, or all composites of one batch shape).
        dim: where the new dim goes, within the batch dims.

    Raises:
        ValueError: leaves of different classes, dtypes, devices or numbers of dims, or
            composites of different batch shapes.

    Examples:
        >>> from tdrl.specs import Composite, Unbounded
        >>> a = Composite(obs=Unbounded(shape=(3,)))
        >>> b = Composite(obs=Unbounded(shape=(5,)))
        >>> type(torch.stack([a, a], 0)).__name__, type(torch.stack([a, b], 0)).__name__
        ('Composite', 'StackedComposite')
    """
    specs = list(specs)
    if not specs:
        raise ValueError(
            "stack_specs: nothing to stack (got an empty sequence; expected at least one spec)."
            " Pass specs."
        )
    first = specs[0]
    d = norm_dim(dim, first.ndim + 1, "stack_specs")
    if all(isinstance(s, Composite) for s in specs):
        shapes = {tuple(s.shape) for s in specs}
        if len(shapes) > 1:
            raise ValueError(
                f"stack_specs: composites have different batch shapes (got {sorted(shapes)};"
                " expected one shape). Expand or index them to a common batch shape."
            )
        stacked = _stack_composites(specs, d)  # type: ignore[arg-type]
        return stacked if stacked is not None else StackedComposite(specs, dim=d)  # type: ignore[arg-type]
    leaf = _stack_leaves(specs, d)
    if leaf is None:
        if _stackable(specs) and d <= first._index_ndim:
            return Stacked(*specs, dim=d)
        raise ValueError(
            f"stack_specs: leaves differ (got {[repr(s) for s in specs]}; expected one class,"
            " dtype, device and number of dims, and a batch dim). Put heterogeneous leaves"
            " inside Composites to get a StackedComposite."
        )
    return leaf


class StackedComposite(TensorSpec):
    """A stack of Composites whose entries differ (e.g. agents with different observations).

    Values are ``tensordict.LazyStackedTensorDict``; ``stacked[i]`` along the stack dim gives
    the i-th Composite. Build it with ``torch.stack`` or :func:`stack_specs`.

    Args:
        specs: Composites of one batch shape.
        dim: the stack dim, within ``0 .. batch ndim``.

    Examples:
        >>> from tdrl.specs import Composite, Unbounded
        >>> spec = torch.stack(
        ...     [Composite(obs=Unbounded(shape=(3,))), Composite(obs=Unbounded(shape=(5,)))], 0
        ... )
        >>> td = spec.rand()
        >>> td[0]["obs"].shape, td[1]["obs"].shape, spec.is_in(td)
        (torch.Size([3]), torch.Size([5]), True)
    """

    def __init__(self, specs: Sequence[Composite], dim: int = 0) -> None:
        specs = list(specs)
        if not specs or not all(isinstance(s, Composite) for s in specs):
            raise TypeError(
                f"StackedComposite.__init__: expected Composites (got"
                f" {[type(s).__name__ for s in specs]}; expected a non-empty list of"
                " Composite). Use stack_specs for leaves."
            )
        shapes = {tuple(s.shape) for s in specs}
        if len(shapes) > 1:
            raise ValueError(
                f"StackedComposite.__init__: composites have different batch shapes (got"
                f" {sorted(shapes)}; expected one shape). Give them a common batch shape."
            )
        base = specs[0].shape
        self.dim = norm_dim(dim, len(base) + 1, "StackedComposite.__init__")
        devices = {s.device for s in specs}
        device = devices.pop() if len(devices) == 1 else None
        super().__init__(_insert(base, self.dim, len(specs)), device, None)
        self.specs = specs

    def _lazy(self, tds: list[Any], lead: int) -> LazyStackedTensorDict:
        return LazyStackedTensorDict(*tds, stack_dim=lead + self.dim)

    def rand(self, shape: ShapeLike | None = None) -> LazyStackedTensorDict:
        """A lazy stack of random TensorDicts, batch size ``(*shape, *self.shape)``.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).rand((4,)).batch_size
            torch.Size([4, 2])
        """
        lead = len(as_shape(shape))
        return self._lazy([s.rand(shape) for s in self.specs], lead)

    def zero(self, shape: ShapeLike | None = None) -> LazyStackedTensorDict:
        """A lazy stack of zero TensorDicts.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).zero()[1]["x"].tolist()
            [0.0, 0.0]
        """
        return self._lazy([s.zero(shape) for s in self.specs], len(as_shape(shape)))

    def one(self, shape: ShapeLike | None = None) -> LazyStackedTensorDict:
        """A lazy stack of TensorDicts of ones.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).one()[0]["x"].tolist()
            [1.0]
        """
        return self._lazy([s.one(shape) for s in self.specs], len(as_shape(shape)))

    def _parts(self, td: Any) -> list[Any] | None:
        """``td`` split along the stack dim, or ``None`` if its batch shape does not fit."""
        if not isinstance(td, TensorDictBase):
            return None
        lead = td.batch_dims - self.ndim
        if lead < 0 or td.batch_size[lead:] != self.shape:
            return None
        return list(td.unbind(lead + self.dim))

    def is_in(self, val: Any) -> bool:
        """Whether each slice of ``val`` along the stack dim is in its Composite.

        Examples:
            >>> from tdrl.specs import Bounded, Composite
            >>> a, b = Composite(x=Bounded(0.0, 1.0)), Composite(x=Bounded(0.0, 1.0, shape=(2,)))
            >>> spec = stack_specs([a, b])
            >>> spec.is_in(spec.rand()), spec.is_in(spec.one() * 2)
            (True, False)
        """
        parts = self._parts(val)
        return parts is not None and all(s.is_in(p) for s, p in zip(self.specs, parts))

    def _meta_ok(self, td: Any) -> bool:
        parts = self._parts(td)
        return parts is not None and all(s._meta_ok(p) for s, p in zip(self.specs, parts))

    def _split(self, td: Any, key: Any, where: str) -> list[Any]:
        parts = self._parts(td)
        if parts is None:
            got = td.batch_size if isinstance(td, TensorDictBase) else type(td).__name__
            raise SpecError(
                f"{where}: value{'' if key is None else f' for key {key!r}'} does not fit the"
                f" stack (got {got}; expected a TensorDict with batch size (..., "
                f"{', '.join(map(str, self.shape))})). Pass a (lazy) stacked TensorDict."
            )
        return parts

    def _check(self, td: Any, key: Any, method: str) -> None:
        where = f"StackedComposite.{method}"
        parts = self._split(td, key, where)
        for i, (s, p) in enumerate(zip(self.specs, parts)):
            try:
                getattr(s, method)(p, key=key)
            except SpecError as err:
                raise SpecError(f"{where}: element {i} of dim {self.dim}: {err}") from err

    def assert_is_in(self, value: Any, key: Any = None) -> None:
        """Raises a :class:`~tdrl.errors.SpecError` naming the element and key that fail.

        Examples:
            >>> from tdrl.specs import Bounded, Composite
            >>> a, b = Composite(x=Bounded(0.0, 1.0)), Composite(x=Bounded(0.0, 1.0, shape=(2,)))
            >>> stack_specs([a, b]).assert_is_in(stack_specs([a, b]).zero())
        """
        self._check(value, key, "assert_is_in")

    def check_shape_dtype(self, td: Any, key: Any = None) -> None:
        """Metadata-only check of every element.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).check_shape_dtype(stack_specs([a, b]).zero())
        """
        if not self._meta_ok(td):
            self._check(td, key, "check_shape_dtype")

    def project(self, val: Any) -> LazyStackedTensorDict:
        """A lazy stack of the projected elements.

        Examples:
            >>> from tdrl.specs import Bounded, Composite
            >>> a, b = Composite(x=Bounded(0.0, 1.0)), Composite(x=Bounded(0.0, 1.0, shape=(2,)))
            >>> spec = stack_specs([a, b])
            >>> spec.is_in(spec.project(spec.one() * 3))
            True
        """
        parts = self._split(val, None, "StackedComposite.project")
        lead = val.batch_dims - self.ndim
        return self._lazy([s.project(p) for s, p in zip(self.specs, parts)], lead)

    def encode(self, val: Sequence[Any], *, ignore_device: bool = False) -> LazyStackedTensorDict:
        """A lazy stack from one (nested) dict of values per element.

        ``ignore_device`` is passed to every element (see :meth:`Composite.encode`).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).encode([{"x": [1.0]}, {"x": [2.0, 3.0]}])[1]["x"].tolist()
            [2.0, 3.0]
        """
        parts = [s.encode(v, ignore_device=ignore_device) for s, v in zip(self.specs, val)]
        return self._lazy(parts, 0)

    # ------------------------------------------------------------------ structure
    def __len__(self) -> int:
        return len(self.specs)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """The keys common to every element (in the first element's order).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a = Composite(x=Unbounded(shape=(1,)), y=Unbounded())
            >>> stack_specs([a, Composite(x=Unbounded(shape=(2,)))]).keys()
            ['x']
        """
        common = [set(s.keys(include_nested, leaves_only)) for s in self.specs[1:]]
        return [
            k
            for k in self.specs[0].keys(include_nested, leaves_only)
            if all(k in c for c in common)
        ]

    def __contains__(self, key: object) -> bool:
        return is_key(key) and all(key in s for s in self.specs)

    def __getitem__(self, idx: Any) -> Any:
        """``stacked[i]`` (stack dim 0) is the i-th Composite; a key stacks the entries.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b])[1]["x"].shape
            torch.Size([2])
        """
        if is_key(idx):
            return stack_specs([s[idx] for s in self.specs], self.dim)
        if self.dim == 0 and isinstance(idx, int):
            return self.specs[idx]
        if self.dim == 0 and isinstance(idx, slice):
            return StackedComposite(self.specs[idx], dim=0)
        if isinstance(idx, int):
            return StackedComposite([s[idx] for s in self.specs], dim=self.dim - 1)
        raise IndexError(
            f"StackedComposite.__getitem__: unsupported index (got {idx!r}; expected a key, an"
            " int, or a slice on the stack dim 0). Index the elements via stacked.specs."
        )

    def expand(self, *shape: Any) -> StackedComposite:
        """Prepends dims to every element (trailing dims must equal ``self.shape``).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).expand(3, 2).rand().batch_size
            torch.Size([3, 2])
        """
        new = shape_from_args(shape)
        lead = len(new) - self.ndim
        if lead < 0 or new[lead:] != self.shape:
            raise ValueError(
                f"StackedComposite.expand: the trailing dims must equal the spec shape (got"
                f" {tuple(new)}; expected (..., {', '.join(map(str, self.shape))})). Only"
                " prepend new dims."
            )
        specs = [s.expand(*new[:lead], *s.shape) for s in self.specs]
        return StackedComposite(specs, dim=self.dim + lead)

    def unsqueeze(self, dim: int) -> StackedComposite:
        """Inserts a size-1 dim at ``dim`` (shifting the stack dim when needed).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).unsqueeze(0).shape
            torch.Size([1, 2])
        """
        d = norm_dim(dim, self.ndim + 1, "StackedComposite.unsqueeze")
        if d <= self.dim:
            return StackedComposite([s.unsqueeze(d) for s in self.specs], dim=self.dim + 1)
        return StackedComposite([s.unsqueeze(d - 1) for s in self.specs], dim=self.dim)

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Removes size-1 dims (the stack dim too, giving the single Composite).

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).unsqueeze(0).squeeze().shape
            torch.Size([2])
        """
        dims = [i for i, s in enumerate(self.shape) if s == 1]
        if dim is not None:
            d = norm_dim(dim, self.ndim, "StackedComposite.squeeze")
            dims = [d] if d in dims else []
        out: TensorSpec = self
        for d in reversed(dims):
            out = out._squeeze_one(d) if isinstance(out, StackedComposite) else out.squeeze(d)
        return out

    def _squeeze_one(self, d: int) -> TensorSpec:
        if d == self.dim:
            return self.specs[0]
        inner = d if d < self.dim else d - 1
        shift = 1 if d < self.dim else 0
        return StackedComposite([s.squeeze(inner) for s in self.specs], dim=self.dim - shift)

    def to(self, dest: DeviceLike | torch.dtype) -> StackedComposite:
        """A copy with every element moved or cast.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> stack_specs([a, b]).to("cpu").device
            device(type='cpu')
        """
        return StackedComposite([s.to(dest) for s in self.specs], dim=self.dim)

    def clone(self) -> StackedComposite:
        """A deep copy.

        Examples:
            >>> from tdrl.specs import Composite, Unbounded
            >>> a, b = Composite(x=Unbounded(shape=(1,))), Composite(x=Unbounded(shape=(2,)))
            >>> spec = stack_specs([a, b])
            >>> spec.clone() == spec
            True
        """
        return StackedComposite([s.clone() for s in self.specs], dim=self.dim)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StackedComposite) or type(other) is not type(self):
            return False
        if (self.dim, len(self.specs)) != (other.dim, len(other.specs)):
            return False
        return all(a == b for a, b in zip(self.specs, other.specs))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        lines = [
            f"    {i}: {repr(s).replace(chr(10), chr(10) + '    ')},"
            for i, s in enumerate(self.specs)
        ]
        tail = f"    dim={self.dim}, shape={self.shape}, device={self.device})"
        return "\n".join(["StackedComposite(", *lines, tail])
