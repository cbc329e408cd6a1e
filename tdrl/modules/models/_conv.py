"""ConvNet: a stack of 2D convolutions followed by an aggregator (TorchRL's arguments)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tdrl.modules.models._layers import (
    DeviceLike,
    SquashDims,
    SqueezeLast2,
    build_on_device,
    per_layer_kwargs,
)

__all__ = ["ConvNet"]

KernelLike = int | tuple[int, int]
KwargsLike = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


def _depth(depth: int | None, named: dict[str, Any]) -> int:
    lengths = {k: len(v) for k, v in named.items() if isinstance(v, (list, tuple))}
    if depth is None:
        if not lengths:
            raise ValueError(
                "ConvNet.__init__: the depth is unknown (got depth=None and only ints for"
                " num_cells, kernel_sizes, strides and paddings; expected depth or a list)."
                " Pass depth or a list of num_cells."
            )
        depth = next(iter(lengths.values()))
    if depth < 1:
        raise ValueError(
            f"ConvNet.__init__: depth must be at least 1 (got {depth}; expected a positive int)."
            " Pass depth >= 1 or a non-empty num_cells."
        )
    for name, n in lengths.items():
        if n != depth:
            raise ValueError(
                f"ConvNet.__init__: {name} has the wrong length (got {n}; expected {depth}, one"
                " per layer). Pass an int or one value per layer."
            )
    return depth


def _expand(value: Any, depth: int) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value] * depth


class ConvNet(nn.Sequential):
    """2D convolutions, each followed by its activation (and norm), then an aggregator.

    The arguments, their order and defaults are TorchRL's: three convolutions of 32 channels
    with ELU and a :class:`SquashDims` aggregator that flattens channels and pixels. Inputs have
    shape ``(*batch, C, H, W)`` with any number of batch dims (including none); with the default
    aggregator the output has shape ``(*batch, features)``.

    Args:
        in_features: input channels; ``None`` builds a lazy first layer.
        depth: number of convolutions; ``None`` takes it from the list arguments.
        num_cells: output channels of each convolution, an int or one per layer
            (default ``[32, 32, 32]``).
        kernel_sizes: kernel size, an int (or pair) or one per layer.
        strides: stride, an int or one per layer.
        paddings: padding, an int or one per layer.
        activation_class: activation class or factory applied after every convolution.
        activation_kwargs: keyword arguments of the activations, one dict or one per layer.
        norm_class: optional normalisation inserted after each activation, built as
            ``norm_class(**norm_kwargs)``; without ``norm_kwargs`` as ``norm_class(channels)``
            (e.g. ``nn.BatchNorm2d``).
        norm_kwargs: keyword arguments of the norm layers, one dict or one per layer.
        bias_last_layer: whether the last convolution has a bias.
        aggregator_class: module appended at the end (``None``: keep the feature maps).
        aggregator_kwargs: its keyword arguments (default ``{"ndims_in": 3}``).
        squeeze_output: remove two trailing singleton dims at the end.
        device: where the parameters are created.

    Raises:
        ValueError: per-layer lists of inconsistent lengths, a null depth, or an input with
            fewer than 3 dims.

    Examples:
        >>> net = ConvNet(num_cells=[8, 8], kernel_sizes=3, strides=[2, 1])
        >>> net(torch.zeros(4, 2, 3, 16, 16)).shape
        torch.Size([4, 2, 200])
        >>> net(torch.zeros(3, 16, 16)).shape
        torch.Size([200])
        >>> [m.out_channels for m in ConvNet(3) if isinstance(m, torch.nn.Conv2d)]
        [32, 32, 32]
    """

    def __init__(
        self,
        in_features: int | None = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        kernel_sizes: KernelLike | Sequence[KernelLike] = 3,
        strides: int | Sequence[int] = 1,
        paddings: int | Sequence[int] = 0,
        activation_class: Callable[..., nn.Module] = nn.ELU,
        activation_kwargs: KwargsLike = None,
        norm_class: Callable[..., nn.Module] | None = None,
        norm_kwargs: KwargsLike = None,
        bias_last_layer: bool = True,
        aggregator_class: Callable[..., nn.Module] | None = SquashDims,
        aggregator_kwargs: Mapping[str, Any] | None = None,
        squeeze_output: bool = False,
        device: DeviceLike = None,
    ) -> None:
        if num_cells is None:
            num_cells = [32, 32, 32]
        named = {
            "num_cells": num_cells,
            "kernel_sizes": kernel_sizes,
            "strides": strides,
            "paddings": paddings,
        }
        n = _depth(depth, named)
        channels = [int(c) for c in _expand(num_cells, n)]
        kernels, stride_l, pad_l = (_expand(v, n) for v in (kernel_sizes, strides, paddings))
        where = "ConvNet.__init__"
        act_kw = per_layer_kwargs(activation_kwargs, n, where, "activation_kwargs")
        norm_kw = (
            None if norm_kwargs is None else per_layer_kwargs(norm_kwargs, n, where, "norm_kwargs")
        )
        layers: list[nn.Module] = []
        prev = in_features
        for i, (c, k, s, p) in enumerate(zip(channels, kernels, stride_l, pad_l)):
            bias = i < n - 1 or bias_last_layer
            if prev is None:
                conv: nn.Module = nn.LazyConv2d(c, k, stride=s, padding=p, bias=bias, device=device)
            else:
                conv = nn.Conv2d(prev, c, k, stride=s, padding=p, bias=bias, device=device)
            layers.append(conv)
            layers.append(build_on_device(activation_class, device, **act_kw[i]))
            if norm_class is not None:
                if norm_kw is None:
                    layers.append(build_on_device(norm_class, device, c))
                else:
                    layers.append(build_on_device(norm_class, device, **norm_kw[i]))
            prev = c
        if aggregator_class is not None:
            agg_kw = dict(aggregator_kwargs) if aggregator_kwargs is not None else {"ndims_in": 3}
            layers.append(build_on_device(aggregator_class, device, **agg_kw))
        if squeeze_output:
            layers.append(SqueezeLast2())
        super().__init__(*layers)
        self.in_features = in_features
        self.depth = n
        self.num_cells = channels
        self.out_features = channels[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies the layers to ``(*batch, C, H, W)``, folding the batch dims into one."""
        if x.ndim < 3:
            raise ValueError(
                f"ConvNet.forward: the input needs at least 3 dims (got shape {tuple(x.shape)};"
                " expected (*batch, C, H, W)). Add the channel dim."
            )
        batch = x.shape[:-3]
        if len(batch) <= 1:
            return super().forward(x)
        y = super().forward(x.flatten(0, len(batch) - 1))
        return y.unflatten(0, batch)
