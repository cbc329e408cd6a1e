"""Building specs from data."""

from __future__ import annotations

from tensordict import LazyStackedTensorDict, TensorDictBase, is_non_tensor

from tdrl.specs._base import TensorSpec
from tdrl.specs._composite import Composite
from tdrl.specs._continuous import Unbounded
from tdrl.specs._non_tensor import NonTensor
from tdrl.specs._stacked import stack_specs

__all__ = ["make_composite_from_td"]


def make_composite_from_td(
    data: TensorDictBase, *, unsqueeze_null_shapes: bool = True, dynamic_shape: bool = False
) -> TensorSpec:
    """A spec of :class:`Unbounded` leaves with the shapes, dtypes and devices of ``data``.

    Nested TensorDicts become nested Composites; non-tensor entries become :class:`NonTensor`;
    a lazy stack of heterogeneous TensorDicts becomes a :class:`StackedComposite`.

    Args:
        data: the data to describe.
        unsqueeze_null_shapes: if True (TorchRL's default), a tensor of shape ``()`` gets a
            spec of shape ``(1,)``; if False its spec keeps shape ``()``.
        dynamic_shape: only False (TorchRL's dynamic last dim, ``-1``, has no tdrl spec).

    Raises:
        NotImplementedError: ``dynamic_shape=True``.

    Returns:
        A :class:`Composite` with ``shape == td.batch_size`` (or a StackedComposite).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(obs=torch.zeros(4, 3), batch_size=[4])
        >>> spec = make_composite_from_td(td)
        >>> spec["obs"].shape, spec.is_in(td)
        (torch.Size([4, 3]), True)
        >>> make_composite_from_td(TensorDict(r=torch.tensor(0.0)))["r"].shape
        torch.Size([1])
    """
    if dynamic_shape:
        raise NotImplementedError(
            "make_composite_from_td: dynamic_shape=True is not supported (got True; expected"
            " False): tdrl specs have no dynamic (-1) dims. Drop the argument."
        )
    td = data
    if isinstance(td, LazyStackedTensorDict) and not is_non_tensor(td):
        # In the stack every entry has the stack dim, so none of them has a null shape.
        parts = [make_composite_from_td(t, unsqueeze_null_shapes=False) for t in td.tensordicts]
        return stack_specs(parts, td.stack_dim)
    out = Composite(shape=td.batch_size, device=td.device)
    for key, value in td.items():
        if is_non_tensor(value):
            example = getattr(value, "data", None)
            shape = getattr(value, "batch_size", value.shape)
            spec: TensorSpec = NonTensor(shape, value.device, example_data=example)
        elif isinstance(value, TensorDictBase):
            spec = make_composite_from_td(value, unsqueeze_null_shapes=unsqueeze_null_shapes)
        else:
            null = unsqueeze_null_shapes and value.ndim == 0
            spec = Unbounded((1,) if null else value.shape, value.device, dtype=value.dtype)
        out.set(key, spec)
    return out
