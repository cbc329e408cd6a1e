"""MLP: a stack of linear layers with activations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["MLP"]

DeviceLike = torch.device | str | None


def _layer_sizes(num_cells: int | Sequence[int], depth: int | None, where: str) -> list[int]:
    if isinstance(num_cells, int):
        if depth is None or depth < 0:
            raise ValueError(
                f"{where}: depth must be a non-negative int when num_cells is an int (got"
                f" depth={depth!r}; expected e.g. depth=2). Pass depth or a list of num_cells."
            )
        return [num_cells] * depth
    sizes = [int(n) for n in num_cells]
    if depth is not None and depth != len(sizes):
        raise ValueError(
            f"{where}: depth does not match num_cells (got depth={depth}, {len(sizes)} sizes;"
            " expected depth=None or len(num_cells)). Drop depth when num_cells is a list."
        )
    return sizes


class MLP(nn.Sequential):
    """Linear layers with an activation between them (and optionally after the last one).

    Several inputs are concatenated along the last dim first, so ``MLP`` can read
    ``("observation", "action")`` in a Q-value module. With ``out_features`` a shape tuple the
    output is reshaped to ``(*batch, *out_features)``.

    Args:
        in_features: input size; ``None`` builds a lazy first layer that infers it on first use.
        out_features: output size, an int or a shape tuple.
        num_cells: hidden sizes: a list, or an int repeated ``depth`` times.
        depth: number of hidden layers when ``num_cells`` is an int (default 2).
        activation: activation class (instantiated with ``activation_kwargs`` after each
            hidden layer).
        activation_kwargs: keyword arguments of the activation.
        activate_last_layer: also apply the activation after the output layer.
        norm_class: optional normalisation class inserted after each hidden linear layer,
            built as ``norm_class(size)`` (e.g. ``nn.LayerNorm``).
        dropout: dropout probability after each hidden activation (0 = none).
        bias_last_layer: whether the output layer has a bias.
        device: where the parameters are created (the module keeps no device).

    Raises:
        ValueError: inconsistent ``num_cells``/``depth``.

    Examples:
        >>> mlp = MLP(in_features=4, out_features=2, num_cells=32)
        >>> mlp(torch.zeros(5, 4)).shape
        torch.Size([5, 2])
        >>> MLP(out_features=(2, 3), num_cells=[16])(torch.zeros(7, 4), torch.zeros(7, 1)).shape
        torch.Size([7, 2, 3])
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | Sequence[int] = 1,
        *,
        num_cells: int | Sequence[int] = 256,
        depth: int | None = None,
        activation: type[nn.Module] = nn.Tanh,
        activation_kwargs: dict[str, Any] | None = None,
        activate_last_layer: bool = False,
        norm_class: type[nn.Module] | None = None,
        dropout: float = 0.0,
        bias_last_layer: bool = True,
        device: DeviceLike = None,
    ) -> None:
        if isinstance(num_cells, int) and depth is None:
            depth = 2
        sizes = _layer_sizes(num_cells, depth, "MLP.__init__")
        out_shape = (out_features,) if isinstance(out_features, int) else tuple(out_features)
        act_kwargs = activation_kwargs or {}
        layers: list[nn.Module] = []
        prev = in_features
        for size in sizes:
            layers.append(_linear(prev, size, True, device))
            if norm_class is not None:
                layers.append(norm_class(size))
            layers.append(activation(**act_kwargs))
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            prev = size
        layers.append(_linear(prev, math.prod(out_shape), bias_last_layer, device))
        if activate_last_layer:
            layers.append(activation(**act_kwargs))
        if len(out_shape) != 1:
            layers.append(nn.Unflatten(-1, out_shape))
        super().__init__(*layers)
        self.in_features = in_features
        self.out_features = out_shape if len(out_shape) != 1 else out_shape[0]

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Concatenates the inputs along the last dim and applies the layers."""
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        for layer in self:
            x = layer(x)
        return x


def _linear(in_f: int | None, out_f: int, bias: bool, device: DeviceLike) -> nn.Module:
    if in_f is None:
        return nn.LazyLinear(out_f, bias=bias, device=device)
    return nn.Linear(in_f, out_f, bias=bias, device=device)
