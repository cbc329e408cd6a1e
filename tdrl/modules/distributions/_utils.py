"""Helpers shared by the distributions (bounds, event-dim reductions)."""

from __future__ import annotations

import torch
from torch import Tensor

Bound = float | int | Tensor
SampleShape = torch.Size | list[int] | tuple[int, ...]
_EMPTY_SHAPE = torch.Size()


def _as_tensor(value: Bound, ref: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value.to(device=ref.device, dtype=ref.dtype)
    return torch.tensor(float(value), device=ref.device, dtype=ref.dtype)


def _check_number_bounds(low: Bound, high: Bound, owner: str) -> None:
    if not float(low) < float(high):
        raise ValueError(
            f"{owner}: low must be smaller than high (got low={low!r}, high={high!r}; "
            "expected low < high). Swap or fix the bounds."
        )


def _bounds(
    low: Bound, high: Bound, ref: Tensor, owner: str, validate: bool
) -> tuple[Tensor, Tensor]:
    """Returns ``low`` and ``high`` as tensors on the device and dtype of ``ref``.

    Python numbers are always checked; tensor bounds only when ``validate`` is true, because
    the check reads the values back (a device synchronisation on each construction).
    """
    tensor_bounds = isinstance(low, Tensor) or isinstance(high, Tensor)
    if not tensor_bounds:
        _check_number_bounds(low, high, owner)
    low_t, high_t = _as_tensor(low, ref), _as_tensor(high, ref)
    if tensor_bounds and validate and not bool((low_t < high_t).all()):
        raise ValueError(
            f"{owner}: low must be smaller than high everywhere (got low={low_t}, "
            f"high={high_t}; expected low < high). Swap or fix the bounds."
        )
    return low_t, high_t


def _event_shape(param: Tensor, owner: str, name: str) -> torch.Size:
    if param.ndim < 1:
        raise ValueError(
            f"{owner}: {name} must have at least one dimension, the last one being the event "
            f"(action) dimension (got shape {tuple(param.shape)}; expected (*batch, n)). "
            f"Use {name}.unsqueeze(-1) for a scalar action."
        )
    return param.shape[-1:]


def _check_params(logits: Tensor | None, probs: Tensor | None, owner: str) -> None:
    if (logits is None) == (probs is None):
        raise ValueError(
            f"{owner}: exactly one of logits and probs must be given (got "
            f"logits={'None' if logits is None else 'a tensor'}, "
            f"probs={'None' if probs is None else 'a tensor'}; expected one tensor). "
            "Pass logits=... or probs=...."
        )
