"""ConvNet: a stack of 2D convolutions followed by a flatten."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["ConvNet"]

DeviceLike = torch.device | str | None


def _per_layer(value: int | Sequence[int], n: int, name: str) -> list[int]:
    if isinstance(value, int):
        return [value] * n
    values = [int(v) for v in value]
    if len(values) != n:
        raise ValueError(
            f"ConvNet.__init__: {name} has the wrong length (got {len(values)}; expected"
            f" {n}, one per layer of num_cells). Pass an int or one value per layer."
        )
    return values


class ConvNet(nn.Module):
    """2D convolutions with activations, then a flatten of channels and pixels.

    Inputs have shape ``(*batch, C, H, W)`` with any number of batch dims (including none);
    the output has shape ``(*batch, features)``.

    Args:
        in_features: input channels; ``None`` builds a lazy first layer.
        num_cells: output channels of each convolution.
        kernel_sizes: kernel size, an int or one per layer.
        strides: stride, an int or one per layer.
        paddings: padding, an int or one per layer.
        activation: activation class applied after every convolution.
        activation_kwargs: keyword arguments of the activation.
        norm_class: optional normalisation class, built as ``norm_class(channels)`` (e.g.
            ``nn.BatchNorm2d``), inserted after each convolution.
        device: where the parameters are created.

    Raises:
        ValueError: per-layer lists of the wrong length, or an input with fewer than 3 dims.

    Examples:
        >>> net = ConvNet(num_cells=[8, 8], kernel_sizes=3, strides=[2, 1])
        >>> net(torch.zeros(4, 2, 3, 16, 16)).shape
        torch.Size([4, 2, 200])
        >>> net(torch.zeros(3, 16, 16)).shape
        torch.Size([200])
    """

    def __init__(
        self,
        in_features: int | None = None,
        *,
        num_cells: Sequence[int] = (32, 32, 32),
        kernel_sizes: int | Sequence[int] = 3,
        strides: int | Sequence[int] = 1,
        paddings: int | Sequence[int] = 0,
        activation: type[nn.Module] = nn.ELU,
        activation_kwargs: dict[str, Any] | None = None,
        norm_class: type[nn.Module] | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        channels = [int(c) for c in num_cells]
        n = len(channels)
        kernels = _per_layer(kernel_sizes, n, "kernel_sizes")
        stride_l = _per_layer(strides, n, "strides")
        pad_l = _per_layer(paddings, n, "paddings")
        layers: list[nn.Module] = []
        prev = in_features
        for c, k, s, p in zip(channels, kernels, stride_l, pad_l):
            if prev is None:
                layers.append(nn.LazyConv2d(c, k, stride=s, padding=p, device=device))
            else:
                layers.append(nn.Conv2d(prev, c, k, stride=s, padding=p, device=device))
            if norm_class is not None:
                layers.append(norm_class(c))
            layers.append(activation(**(activation_kwargs or {})))
            prev = c
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies the convolutions to ``(*batch, C, H, W)`` and flattens to ``(*batch, F)``."""
        if x.ndim < 3:
            raise ValueError(
                f"ConvNet.forward: the input needs at least 3 dims (got shape {tuple(x.shape)};"
                " expected (*batch, C, H, W)). Add the channel dim."
            )
        batch = x.shape[:-3]
        y = self.layers(x.reshape(-1, *x.shape[-3:]))
        return y.reshape(*batch, -1)
