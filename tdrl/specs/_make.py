"""Building specs from data."""

from __future__ import annotations

from tensordict import LazyStackedTensorDict, TensorDictBase, is_non_tensor

from tdrl.specs._base import TensorSpec
from tdrl.specs._composite import Composite
from tdrl.specs._continuous import Unbounded
from tdrl.specs._non_tensor import NonTensor
from tdrl.specs._stacked import stack_specs

__all__ = ["make_composite_from_td"]


def make_composite_from_td(td: TensorDictBase) -> TensorSpec:
    """A spec of :class:`Unbounded` leaves with the shapes, dtypes and devices of ``td``.

    Nested TensorDicts become nested Composites; non-tensor entries become :class:`NonTensor`;
    a lazy stack of heterogeneous TensorDicts becomes a :class:`StackedComposite`.

    Args:
        td: the data to describe.

    Returns:
        A :class:`Composite` with ``shape == td.batch_size`` (or a StackedComposite).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(obs=torch.zeros(4, 3), batch_size=[4])
        >>> spec = make_composite_from_td(td)
        >>> spec["obs"].shape, spec.is_in(td)
        (torch.Size([4, 3]), True)
    """
    if isinstance(td, LazyStackedTensorDict) and not is_non_tensor(td):
        parts = [make_composite_from_td(t) for t in td.tensordicts]
        return stack_specs(parts, td.stack_dim)
    out = Composite(shape=td.batch_size, device=td.device)
    for key, value in td.items():
        if is_non_tensor(value):
            example = getattr(value, "data", None)
            shape = getattr(value, "batch_size", value.shape)
            spec: TensorSpec = NonTensor(shape, value.device, example_data=example)
        elif isinstance(value, TensorDictBase):
            spec = make_composite_from_td(value)
        else:
            spec = Unbounded(value.shape, value.device, dtype=value.dtype)
        out.set(key, spec)
    return out
