"""The abstract ``TensorSpec`` and the machinery its leaves share."""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tdrl.errors import SpecError
from tdrl.specs._utils import (
    DeviceLike,
    ShapeLike,
    as_shape,
    expand_ellipsis,
    index_shape,
    norm_dim,
    shape_from_args,
)

__all__ = ["TensorSpec"]


def _for_key(key: Any) -> str:
    return "" if key is None else f" for key {key!r}"


class TensorSpec(abc.ABC):
    """Describes a tensor: its shape, dtype, device and the domain its values live in.

    Leading dims of ``shape`` are batch dims: ``expand``, ``squeeze``, ``unsqueeze`` and indexing
    act on them. Some specs have trailing "event" dims that are part of one value (the one-hot
    dim of :class:`OneHot`, for instance) and cannot be indexed away.

    Subclasses implement ``rand``, ``_in_domain``, ``_describe_violation`` and ``project``;
    tensors whose leading dims follow the batch dims (``low``/``high``, ``mask``) are listed in
    ``_domain_tensors`` so shape and device operations handle them generically.

    Examples:
        >>> from tdrl.specs import Bounded
        >>> spec = Bounded(-1.0, 1.0, shape=(3,))
        >>> spec.rand((2,)).shape
        torch.Size([2, 3])
        >>> spec.is_in(torch.zeros(3))
        tensor(True)
    """

    _event_ndim: int = 0
    _domain_tensors: tuple[str, ...] = ()
    _dtype_tensors: tuple[str, ...] = ()

    shape: torch.Size
    device: torch.device | None
    dtype: torch.dtype | None

    def __init__(
        self, shape: ShapeLike | None, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        self.shape = as_shape(shape)
        self.device = device
        self.dtype = dtype

    # ------------------------------------------------------------------ basics
    @property
    def ndim(self) -> int:
        """Number of dims of ``shape``."""
        return len(self.shape)

    @property
    def _index_ndim(self) -> int:
        return self.ndim - self._event_ndim

    def _full_shape(self, shape: ShapeLike | None) -> torch.Size:
        if shape is None:
            return self.shape
        return torch.Size((*as_shape(shape), *self.shape))

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Supports ``torch.stack`` on specs (see :func:`stack_specs`)."""
        if func is torch.stack:
            from tdrl.specs._stacked import stack_specs

            return stack_specs(*args, **(kwargs or {}))
        return NotImplemented

    # ------------------------------------------------------------------ values
    @abc.abstractmethod
    def rand(self, shape: ShapeLike | None = None) -> Any:
        """A random value of shape ``(*shape, *self.shape)`` inside the domain."""

    def zero(self, shape: ShapeLike | None = None) -> Any:
        """A tensor of zeros of shape ``(*shape, *self.shape)`` (not projected in the domain).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Unbounded(shape=(2,)).zero((3,)).shape
            torch.Size([3, 2])
        """
        return torch.zeros(self._full_shape(shape), dtype=self.dtype, device=self.device)

    def one(self, shape: ShapeLike | None = None) -> Any:
        """A tensor of ones of shape ``(*shape, *self.shape)`` (not projected in the domain).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Unbounded(shape=(2,)).one().tolist()
            [1.0, 1.0]
        """
        return torch.ones(self._full_shape(shape), dtype=self.dtype, device=self.device)

    @abc.abstractmethod
    def project(self, val: Any) -> Any:
        """Maps ``val`` (already of the right shape) into the domain."""

    def _in_domain(self, x: torch.Tensor) -> bool:
        return True

    def _in_domain_tensor(self, x: torch.Tensor) -> torch.Tensor | None:
        """A 0-d bool tensor: whether ``x`` (of the right shape and dtype) is in the domain.

        ``None`` (the default) for the specs whose ``is_in`` answers a Python bool in TorchRL;
        the specs whose TorchRL ``is_in`` returns a tensor (Bounded, Categorical, OneHot,
        Binary) compute it here.
        """
        return None

    def _describe_violation(self, x: torch.Tensor) -> str:
        return "is outside the domain"

    def _domain_text(self) -> str:
        return "any value"

    def _meta_ok(self, x: Any) -> bool:
        """Fast metadata check (no data pass, no message building): the hot-path test."""
        if not isinstance(x, torch.Tensor) or x.dtype != self.dtype:
            return False
        xs = x.shape
        lead = len(xs) - self.ndim
        return lead >= 0 and xs[lead:] == self.shape

    def _meta_error(self, x: Any, key: Any, where: str) -> str | None:
        """Message if ``x`` has the wrong type, shape or dtype, else ``None`` (metadata only)."""
        if not isinstance(x, torch.Tensor):
            return (
                f"{where}: value{_for_key(key)} is not a tensor (got {type(x).__name__};"
                f" expected a torch.Tensor of shape (..., {', '.join(map(str, self.shape))})"
                f" and dtype {self.dtype}). Pass a tensor."
            )
        xs = x.shape
        lead = len(xs) - self.ndim
        if lead < 0 or xs[lead:] != self.shape:
            return (
                f"{where}: value{_for_key(key)} has the wrong shape (got {tuple(xs)}; expected"
                f" trailing dims {tuple(self.shape)}). Reshape the value or fix the spec."
            )
        if x.dtype != self.dtype:
            return (
                f"{where}: value{_for_key(key)} has the wrong dtype (got {x.dtype}; expected"
                f" {self.dtype}). Cast it with .to({self.dtype})."
            )
        return None

    def is_in(self, val: Any) -> bool | torch.Tensor:
        """Whether ``val`` matches the spec shape (extra leading dims allowed), dtype and domain.

        As in TorchRL, a value of the wrong type, shape or dtype gives ``False``; otherwise the
        specs with a domain to check over the data (Bounded, Categorical, OneHot, Binary) answer
        a 0-d bool tensor (no device sync), the others a Python bool. ``if spec.is_in(x):``
        works with both.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> spec = Categorical(3)
            >>> spec.is_in(torch.tensor(2)), spec.is_in(torch.tensor(3)), spec.is_in(2)
            (tensor(True), tensor(False), False)
        """
        if not self._meta_ok(val):
            return False
        found = self._in_domain_tensor(val)
        return self._in_domain(val) if found is None else found

    def check_shape_dtype(self, x: Any, key: Any = None) -> None:
        """Cheap metadata-only check of shape and dtype (no pass over the data).

        Raises:
            SpecError: the value is not a tensor, or has the wrong trailing shape or dtype.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Unbounded(shape=(3,)).check_shape_dtype(torch.zeros(4, 3))
        """
        if not self._meta_ok(x):
            where = f"{type(self).__name__}.check_shape_dtype"
            raise SpecError(self._meta_error(x, key, where) or f"{where}: invalid value.")

    def assert_is_in(self, value: Any, key: Any = None) -> None:
        """Like :meth:`is_in` but raises a :class:`~tdrl.errors.SpecError` that says why.

        Examples:
            >>> from tdrl.specs import Bounded
            >>> Bounded(-2.0, 2.0, shape=(2,)).assert_is_in(torch.tensor([1.0, 3.0]), key="a")
            Traceback (most recent call last):
            ...
            tdrl.errors.SpecError: Bounded.assert_is_in: value for key 'a' is out of bounds ...
        """
        where = f"{type(self).__name__}.assert_is_in"
        msg = self._meta_error(value, key, where)
        if msg is not None:
            raise SpecError(msg)
        if not self._in_domain(value):
            raise SpecError(
                f"{where}: value{_for_key(key)} {self._describe_violation(value)}; expected"
                f" {self._domain_text()}). Use spec.project(value) or fix the producer."
            )

    def encode(self, val: Any, *, ignore_device: bool = False) -> torch.Tensor:
        """Turns a numpy array, python scalar, list or tensor into a tensor of this spec.

        The result has the spec dtype and device; it is reshaped to the spec shape when only
        the number of elements matches.

        Args:
            val: the value to encode.
            ignore_device: if True, the value is not moved to the spec device (numpy data
                stays on CPU, tensors where they are), so the caller can move a whole
                TensorDict at once.

        Examples:
            >>> import numpy as np
            >>> from tdrl.specs import Unbounded
            >>> Unbounded(shape=(2, 2)).encode(np.arange(4)).tolist()
            [[0.0, 1.0], [2.0, 3.0]]
        """
        if isinstance(val, torch.Tensor):
            t = val.to(dtype=self.dtype) if ignore_device else val.to(self.device, self.dtype)
        else:
            device = None if ignore_device else self.device
            arr = val if isinstance(val, np.ndarray) else np.asarray(val)
            t = torch.as_tensor(arr, dtype=self.dtype, device=device)
        lead = t.ndim - self.ndim
        if lead >= 0 and t.shape[lead:] == self.shape:
            return t
        if t.numel() == self.shape.numel():
            return t.reshape(self.shape)
        raise SpecError(
            f"{type(self).__name__}.encode: value cannot be shaped like the spec (got shape"
            f" {tuple(t.shape)}; expected trailing dims {tuple(self.shape)} or"
            f" {self.shape.numel()} elements). Pass data of the spec shape."
        )

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """The numpy array of a tensor of this spec (the inverse of :meth:`encode`).

        Args:
            val: a tensor of this spec.
            safe: if True, ``val`` is checked first (:meth:`assert_is_in`); ``None`` means
                False (TorchRL's default; tdrl has no environment switch for it).

        Raises:
            SpecError: ``safe`` is True and ``val`` is not in the spec.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> Categorical(3, shape=(2,)).to_numpy(torch.tensor([0, 2]))
            array([0, 2])
        """
        if safe:
            self.assert_is_in(val)
        return val.detach().cpu().numpy()

    def type_check(self, value: torch.Tensor, key: Any = None) -> None:
        """Raises ``TypeError`` if ``value`` does not have the spec dtype (nothing else checked).

        Args:
            value: the tensor to check.
            key: the entry name, used in the message.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Unbounded().type_check(torch.zeros(1, dtype=torch.int64), key="obs")
            Traceback (most recent call last):
            ...
            TypeError: Unbounded.type_check: value for key 'obs' has the wrong dtype ...
        """
        dtype = getattr(value, "dtype", type(value).__name__)
        if dtype != self.dtype:
            raise TypeError(
                f"{type(self).__name__}.type_check: value{_for_key(key)} has the wrong dtype"
                f" (got {dtype}; expected {self.dtype}). Cast it with .to({self.dtype})."
            )

    # ------------------------------------------------------------------ shapes
    def _map(self, shape: torch.Size, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        out = copy.copy(self)
        out.shape = shape
        for name in self._domain_tensors:
            t = getattr(self, name)
            if t is not None:
                setattr(out, name, fn(t))
        return out

    def _expanded_shape(self, shape: torch.Size, where: str) -> torch.Size:
        lead = len(shape) - self.ndim
        ok = lead >= 0
        new = list(shape)
        for i in range(self.ndim if ok else 0):
            s, own = shape[lead + i], self.shape[i]
            if s == -1:
                new[lead + i] = own
            elif s != own and not (own == 1 and i < self._index_ndim):
                ok = False
        if not ok:
            raise ValueError(
                f"{where}: the trailing dims must match the spec shape (got {tuple(shape)};"
                f" expected (..., {', '.join(map(str, self.shape))})). Only prepend new dims."
            )
        return torch.Size(new)

    def expand(self, *shape: Any) -> TensorSpec:
        """A spec with new leading dims: ``shape`` ends with ``self.shape``, like torch.expand.

        Examples:
            >>> from tdrl.specs import Bounded
            >>> Bounded(0.0, 1.0, shape=(3,)).expand(4, 3).shape
            torch.Size([4, 3])
        """
        new = self._expanded_shape(shape_from_args(shape), f"{type(self).__name__}.expand")
        n_index = len(new) - self._event_ndim
        return self._map(new, lambda t: t.expand(*new[:n_index], *t.shape[self._index_ndim :]))

    def squeeze(self, dim: int | None = None) -> TensorSpec:
        """Removes size-1 batch dims (all of them, or ``dim``).

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Unbounded(shape=(1, 3)).squeeze().shape
            torch.Size([3])
        """
        if dim is None:
            dims = tuple(i for i in range(self._index_ndim) if self.shape[i] == 1)
        else:
            d = norm_dim(dim, self.ndim, f"{type(self).__name__}.squeeze")
            self._check_batch_dim(d, self._index_ndim - 1, "squeeze")
            dims = (d,) if self.shape[d] == 1 else ()
        shape = torch.Size(s for i, s in enumerate(self.shape) if i not in dims)
        return self._map(shape, lambda t: t.squeeze(dims) if dims else t)

    def unsqueeze(self, dim: int) -> TensorSpec:
        """Inserts a size-1 batch dim at ``dim``.

        Examples:
            >>> from tdrl.specs import Unbounded
            >>> Unbounded(shape=(3,)).unsqueeze(0).shape
            torch.Size([1, 3])
        """
        d = norm_dim(dim, self.ndim + 1, f"{type(self).__name__}.unsqueeze")
        self._check_batch_dim(d, self._index_ndim, "unsqueeze")
        shape = torch.Size((*self.shape[:d], 1, *self.shape[d:]))
        return self._map(shape, lambda t: t.unsqueeze(d))

    def _check_batch_dim(self, d: int, last: int, method: str) -> None:
        if d > last:
            raise ValueError(
                f"{type(self).__name__}.{method}: dim {d} is an event dim (got shape"
                f" {tuple(self.shape)}; expected a dim <= {last}). Only batch dims can change."
            )

    def __getitem__(self, idx: Any) -> TensorSpec:
        """Indexes the batch dims: ``spec[0]`` drops the first dim.

        Examples:
            >>> from tdrl.specs import Bounded
            >>> Bounded(0.0, 1.0, shape=(4, 3))[1:3].shape
            torch.Size([2, 3])
        """
        where = f"{type(self).__name__}.__getitem__"
        idx = expand_ellipsis(idx, self._index_ndim)
        batch = index_shape(self.shape[: self._index_ndim], idx, self.device, where)
        shape = torch.Size((*batch, *self.shape[self._index_ndim :]))
        return self._map(shape, lambda t: t[idx])

    # ------------------------------------------------------------------ copies
    def to(self, dest: DeviceLike | torch.dtype) -> TensorSpec:
        """A copy on another device, or with another dtype.

        Examples:
            >>> from tdrl.specs import Bounded
            >>> Bounded(0, 5, shape=(2,), dtype=torch.int64).to(torch.float32).high.dtype
            torch.float32
        """
        if isinstance(dest, torch.dtype):
            out = copy.copy(self)
            out.dtype = dest
            for name in self._dtype_tensors:
                setattr(out, name, getattr(self, name).to(dest))
            out._refresh()
            return out
        device = torch.device(dest) if dest is not None else None
        out = self._map(self.shape, lambda t: t.to(device))
        out.device = device
        out._refresh()
        return out

    def _refresh(self) -> None:  # noqa: B027 - optional hook, most specs hold no cache
        """Hook: rebuild caches derived from the tensors after ``to`` or stacking."""

    def clone(self) -> TensorSpec:
        """A deep copy whose tensors can be changed without touching this spec.

        Examples:
            >>> from tdrl.specs import Categorical
            >>> spec = Categorical(3)
            >>> spec.clone() == spec
            True
        """
        return self._map(self.shape, lambda t: t.clone())

    def _eq_extra(self, other: Any) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, TensorSpec):
            return False
        if (self.shape, self.dtype, self.device) != (other.shape, other.dtype, other.device):
            return False
        if not self._eq_extra(other):
            return False
        for name in self._domain_tensors:
            a, b = getattr(self, name), getattr(other, name)
            if (a is None) != (b is None) or (a is not None and not torch.equal(a, b)):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def _repr_domain(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        parts = [f"shape={self.shape}", *self._repr_domain()]
        parts += [f"dtype={self.dtype}", f"device={self.device}"]
        return f"{type(self).__name__}({', '.join(parts)})"
