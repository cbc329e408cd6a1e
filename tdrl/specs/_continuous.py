"""Unbounded and Bounded specs."""

from __future__ import annotations

import torch

from tdrl.specs._base import TensorSpec
from tdrl.specs._space import ContinuousBox, full_range_box
from tdrl.specs._utils import DeviceLike, ShapeLike, as_shape, leaf_device

__all__ = ["Bounded", "Unbounded"]


def _default_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """TorchRL's rule: no dtype means torch's default float dtype."""
    return torch.get_default_dtype() if dtype is None else dtype


def _is_int(dtype: torch.dtype | None) -> bool:
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex


class Unbounded(TensorSpec):
    """Any value of the given shape and dtype.

    ``rand`` draws standard normals for float dtypes, random bools for ``torch.bool`` and small
    random integers (0 to 9) for other integer dtypes.

    Args:
        shape: the spec shape (int, tuple or torch.Size; default ``(1,)``, as TorchRL).
        device: where values live (default CPU).
        dtype: the value dtype (``None``: ``torch.get_default_dtype()``, as TorchRL).

    Examples:
        >>> spec = Unbounded(shape=(2, 3))
        >>> spec.rand().shape, spec.is_in(torch.full((2, 3), 1e9))
        (torch.Size([2, 3]), True)
    """

    def __init__(
        self,
        shape: ShapeLike = (1,),
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(shape, leaf_device(device), _default_dtype(dtype))

    @property
    def space(self) -> ContinuousBox:
        """The dtype's whole range as a :class:`~tdrl.specs.ContinuousBox` (TorchRL's).

        Examples:
            >>> Unbounded(shape=(2,), dtype=torch.int8).space.high.tolist()
            [127, 127]
        """
        return full_range_box(self.shape, self.dtype, self.device)  # type: ignore[arg-type]

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Random values (normal for floats, small integers otherwise).

        Examples:
            >>> Unbounded(shape=(3,), dtype=torch.int64).rand((2,)).dtype
            torch.int64
        """
        full = self._full_shape(shape)
        if self.dtype is torch.bool:
            return torch.randint(0, 2, full, device=self.device).bool()
        if _is_int(self.dtype):
            return torch.randint(0, 10, full, dtype=self.dtype, device=self.device)
        return torch.randn(full, dtype=self.dtype, device=self.device)

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Returns ``val`` cast to the spec dtype (every value is inside the domain).

        Examples:
            >>> Unbounded().project(torch.tensor(3)).dtype
            torch.float32
        """
        return val.to(self.dtype)


class Bounded(TensorSpec):
    """Values in the box ``[low, high]`` (inclusive).

    Args:
        low: lower bound, a scalar or a tensor broadcastable to ``shape`` (required, as in
            TorchRL, whose signature defaults it to None and then refuses None).
        high: upper bound, a scalar or a tensor broadcastable to ``shape`` (required).
        shape: the spec shape; inferred from ``low``/``high`` when not given.
        device: where values live (default CPU).
        dtype: the value dtype (``None``: ``torch.get_default_dtype()``, as TorchRL); integer
            dtypes draw integers in ``[low, high]``.

    Raises:
        TypeError: ``low`` or ``high`` is missing.

    Attributes:
        low: the lower bound as a tensor of the spec shape.
        high: the upper bound as a tensor of the spec shape.

    Examples:
        >>> spec = Bounded(-1.0, 1.0, shape=(3,))
        >>> spec
        Bounded(shape=torch.Size([3]), low=-1.0, high=1.0, dtype=torch.float32, device=cpu)
        >>> spec.project(torch.tensor([-5.0, 0.5, 5.0])).tolist()
        [-1.0, 0.5, 1.0]
    """

    _domain_tensors = ("low", "high")
    _dtype_tensors = ("low", "high")

    def __init__(
        self,
        low: float | torch.Tensor | None = None,
        high: float | torch.Tensor | None = None,
        shape: ShapeLike | None = None,
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if low is None or high is None:
            raise TypeError(
                f"Bounded.__init__: both bounds are required (got low={low!r}, high={high!r};"
                " expected numbers or tensors). Pass low and high, or use Unbounded."
            )
        dtype = _default_dtype(dtype)
        dev = leaf_device(device)
        low_t = torch.as_tensor(low, device=dev).to(dtype)
        high_t = torch.as_tensor(high, device=dev).to(dtype)
        if shape is None:
            full = torch.broadcast_shapes(low_t.shape, high_t.shape)
        else:
            full = as_shape(shape)
        try:
            low_t, high_t = low_t.expand(full), high_t.expand(full)
        except RuntimeError as err:
            raise ValueError(
                f"Bounded.__init__: low/high do not broadcast to the shape (got low"
                f" {tuple(low_t.shape)}, high {tuple(high_t.shape)}; expected shapes that"
                f" broadcast to {tuple(full)}). Fix low/high or shape."
            ) from err
        # a spec on the "meta" device holds no values to compare
        if low_t.device.type != "meta" and bool((low_t > high_t).any()):
            raise ValueError(
                f"Bounded.__init__: low is above high (got low {low_t.tolist()}, high"
                f" {high_t.tolist()}; expected low <= high). Swap or fix the bounds."
            )
        super().__init__(full, dev, dtype)
        self.low = low_t
        self.high = high_t
        self._refresh()

    @property
    def space(self) -> ContinuousBox:
        """``ContinuousBox(low, high)``: the bounds, shaped like the spec.

        Examples:
            >>> Bounded(0.0, 1.0, shape=(3,)).space.high.tolist()
            [1.0, 1.0, 1.0]
        """
        return ContinuousBox(self.low, self.high)

    def _refresh(self) -> None:
        # rand() needs a fallback only where a bound is infinite: decide it once, not per draw.
        if self.low.device.type == "meta":
            self._finite = True
            return
        self._finite = bool(torch.isfinite(self.low).all() and torch.isfinite(self.high).all())

    def rand(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """Uniform values in ``[low, high]`` (normals clamped where a bound is infinite).

        Examples:
            >>> spec = Bounded(0, 3, shape=(1000,), dtype=torch.int64)
            >>> sorted(spec.rand().unique().tolist())
            [0, 1, 2, 3]
        """
        full = self._full_shape(shape)
        if _is_int(self.dtype):
            low, high = self.low.double(), self.high.double()
            u = torch.rand(full, dtype=torch.float64, device=self.device)
            x = (low + (u * (high - low + 1)).floor()).minimum(high)
            return x.to(self.dtype)
        u = torch.rand(full, dtype=self.dtype, device=self.device)
        # in place on the fresh draw: the same values as low + u * (high - low), two
        # allocations fewer
        x = u.mul_(self.high - self.low).add_(self.low)
        if not self._finite:
            normal = torch.randn(full, dtype=self.dtype, device=self.device)
            x = torch.where(torch.isfinite(x), x, normal.clamp(self.low, self.high))
        return x

    def _in_domain(self, x: torch.Tensor) -> bool:
        return bool(self._in_domain_tensor(x))

    def _in_domain_tensor(self, x: torch.Tensor) -> torch.Tensor:
        return ((x >= self.low) & (x <= self.high)).all()

    def _describe_violation(self, x: torch.Tensor) -> str:
        return f"is out of bounds (got min {x.min().item()}, max {x.max().item()}"

    def _domain_text(self) -> str:
        return f"within [{_fmt(self.low)}, {_fmt(self.high)}]"

    def project(self, val: torch.Tensor) -> torch.Tensor:
        """Clamps ``val`` into ``[low, high]`` (integer specs round first).

        Examples:
            >>> Bounded(0, 3, dtype=torch.int64).project(torch.tensor([-1.2, 2.6, 9.0])).tolist()
            [0, 3, 3]
        """
        if _is_int(self.dtype) and val.is_floating_point():
            val = val.round()
        return val.to(self.dtype).clamp(self.low, self.high)

    def _repr_domain(self) -> list[str]:
        return [f"low={_fmt(self.low)}", f"high={_fmt(self.high)}"]


def _fmt(t: torch.Tensor) -> str:
    """One scalar when all entries agree, else the list of values."""
    if t.numel() == 0:
        return "[]"
    flat = t.reshape(-1)
    if bool((flat == flat[0]).all()):
        return str(flat[0].item())
    return str(t.tolist())
