"""Helpers shared by the plain models: per-layer keyword lists, device placement, a shared bias."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

__all__ = [
    "DeviceLike",
    "SharedBias",
    "SquashDims",
    "SqueezeLast2",
    "build_on_device",
    "per_layer_kwargs",
]

DeviceLike = torch.device | str | int | None


def per_layer_kwargs(
    value: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None, n: int, where: str, name: str
) -> list[dict[str, Any]]:
    """``n`` keyword dicts: one dict repeated, or a list of exactly ``n`` dicts (copied)."""
    if value is None:
        return [{} for _ in range(n)]
    if isinstance(value, Mapping):
        return [dict(value) for _ in range(n)]
    values = [dict(v) for v in value]
    if len(values) != n:
        raise ValueError(
            f"{where}: {name} has the wrong length (got {len(values)} dicts; expected {n}, one"
            f" per layer). Pass one dict for every layer or a list of {n} dicts."
        )
    return values


def build_on_device(
    factory: Callable[..., nn.Module], device: DeviceLike, *args: Any, **kwargs: Any
) -> nn.Module:
    """``factory(*args, **kwargs)`` moved to ``device`` (left where it is when ``device`` is None)."""
    module = factory(*args, **kwargs)
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"build_on_device: the factory did not build a module (got {type(module).__name__};"
            " expected an nn.Module). Pass an nn.Module class or a function returning one."
        )
    return module if device is None else module.to(device)


class SharedBias(nn.Module):
    """Adds one learned scalar to every output feature (``single_bias_last_layer=True``).

    Args:
        device: where the parameter is created.
        dtype: its dtype.

    Examples:
        >>> SharedBias()(torch.ones(2, 3)).tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def __init__(self, device: DeviceLike = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        """Sets the bias back to zero."""
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns ``x + bias``."""
        return x + self.bias


class SquashDims(nn.Module):
    """Flattens the last ``ndims_in`` dims into one (ConvNet's default aggregator).

    Args:
        ndims_in: how many trailing dims are merged.

    Examples:
        >>> SquashDims()(torch.zeros(2, 3, 4, 5)).shape
        torch.Size([2, 60])
    """

    def __init__(self, ndims_in: int = 3) -> None:
        super().__init__()
        self.ndims_in = ndims_in

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns ``x`` with its last ``ndims_in`` dims flattened."""
        return x.flatten(-self.ndims_in, -1)


class SqueezeLast2(nn.Module):
    """Removes the last two dims, which must both have size 1 (``squeeze_output=True``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns ``x`` without its two trailing singleton dims."""
        if x.ndim < 2 or x.shape[-2:] != (1, 1):
            raise ValueError(
                f"ConvNet.forward: squeeze_output needs two trailing dims of size 1 (got shape"
                f" {tuple(x.shape)}; expected (..., 1, 1)). Use aggregator_class=None with a"
                " network whose last feature map is 1x1, or squeeze_output=False."
            )
        return x.squeeze(-1).squeeze(-1)
