"""MLP: a stack of linear layers with activations (TorchRL's argument order and defaults)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tdrl.modules.models._layers import (
    DeviceLike,
    SharedBias,
    build_on_device,
    per_layer_kwargs,
)

__all__ = ["MLP"]

_DEFAULT_CELLS = 32
_LEGACY_INT_DEPTH = 2
KwargsLike = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


def _hidden_sizes(num_cells: int | Sequence[int] | None, depth: int | None) -> list[int]:
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
        raise ValueError(
            f"MLP.__init__: depth must be a non-negative int (got {depth!r}; expected e.g."
            " depth=2). Pass the number of hidden layers."
        )
    if num_cells is None:
        return [_DEFAULT_CELLS] * (depth or 0)
    if isinstance(num_cells, int):
        return [num_cells] * (_LEGACY_INT_DEPTH if depth is None else depth)
    sizes = [int(n) for n in num_cells]
    if depth is not None and depth != len(sizes):
        raise ValueError(
            f"MLP.__init__: depth does not match num_cells (got depth={depth}, {len(sizes)} sizes;"
            " expected depth=None or len(num_cells)). Drop depth when num_cells is a list."
        )
    return sizes


class MLP(nn.Sequential):
    """Linear layers with an activation between them (and optionally after the last one).

    The arguments, their order and their defaults are TorchRL's: ``MLP(in, out)`` is a single
    linear layer, ``depth=d`` alone gives ``d`` hidden layers of 32 cells. Every hidden layer
    is followed by ``Dropout`` (when ``dropout`` is set), the norm layer (when ``norm_class``
    is set) and the activation, in this order. Several inputs are concatenated along the last
    dim first, so ``MLP`` can read ``("observation", "action")`` in a Q-value module. With
    ``out_features`` a shape the output is viewed as ``(*batch, *out_features)``.

    Args:
        in_features: input size; ``None`` builds a lazy first layer that infers it on first use
            (only with ``layer_class=nn.Linear``).
        out_features: output size, an int or a shape (required).
        depth: number of hidden layers; ``None`` takes it from ``num_cells`` (0 when
            ``num_cells`` is None too).
        num_cells: hidden sizes: a list, or an int repeated ``depth`` times (``None``: 32).
            tdrl extension: an int without ``depth`` gives 2 hidden layers.
        activation_class: activation class or factory, built with ``activation_kwargs``.
        activation_kwargs: keyword arguments of the activations, one dict or one per activated
            layer (``depth + activate_last_layer`` dicts).
        norm_class: optional normalisation class, built as ``norm_class(**norm_kwargs)``;
            without ``norm_kwargs`` as ``norm_class(size)`` (e.g. ``nn.LayerNorm``).
        norm_kwargs: keyword arguments of the norm layers, one dict or one per activated layer.
        dropout: dropout probability after each hidden linear layer (``None``: no dropout).
        bias_last_layer: whether the output layer has a bias.
        single_bias_last_layer: the output layer shares one scalar bias over its features.
        layer_class: linear layer class, built as ``layer_class(in, out, bias=..., **kwargs)``.
        layer_kwargs: keyword arguments of the linear layers, one dict or ``depth + 1`` dicts;
            a ``"bias"`` entry overrides the bias of that layer.
        activate_last_layer: also apply dropout, norm and activation after the output layer.
        device: where the parameters are created (the module keeps no device).
        activation: tdrl's former name of ``activation_class``, kept for existing code.

    Raises:
        ValueError: missing ``out_features``, inconsistent ``num_cells``/``depth``, per-layer
            keyword lists of the wrong length, or a lazy first layer of a class other than
            ``nn.Linear``.

    Examples:
        >>> MLP(4, 2)
        MLP(
          (0): Linear(in_features=4, out_features=2, bias=True)
        )
        >>> mlp = MLP(in_features=4, out_features=2, depth=2)
        >>> [m.out_features for m in mlp if isinstance(m, torch.nn.Linear)]
        [32, 32, 2]
        >>> MLP(out_features=(2, 3), num_cells=[16])(torch.zeros(7, 4), torch.zeros(7, 1)).shape
        torch.Size([7, 2, 3])
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | Sequence[int] | None = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        activation_class: Callable[..., nn.Module] = nn.Tanh,
        activation_kwargs: KwargsLike = None,
        norm_class: Callable[..., nn.Module] | None = None,
        norm_kwargs: KwargsLike = None,
        dropout: float | None = None,
        bias_last_layer: bool = True,
        single_bias_last_layer: bool = False,
        layer_class: Callable[..., nn.Module] = nn.Linear,
        layer_kwargs: KwargsLike = None,
        activate_last_layer: bool = False,
        device: DeviceLike = None,
        *,
        activation: Callable[..., nn.Module] | None = None,
    ) -> None:
        if out_features is None:
            raise ValueError(
                "MLP.__init__: out_features is missing (got None; expected an int or a shape)."
                " Pass out_features, e.g. MLP(in_features, out_features)."
            )
        if activation is not None:
            if activation_class is not nn.Tanh and activation_class is not activation:
                raise ValueError(
                    f"MLP.__init__: activation and activation_class disagree (got {activation!r}"
                    f" and {activation_class!r}; expected one of them). Pass activation_class."
                )
            activation_class = activation
        sizes = _hidden_sizes(num_cells, depth)
        n_act = len(sizes) + int(activate_last_layer)
        self._act_kwargs = per_layer_kwargs(
            activation_kwargs, n_act, "MLP.__init__", "activation_kwargs"
        )
        self._norm_kwargs = (
            None
            if norm_kwargs is None
            else per_layer_kwargs(norm_kwargs, n_act, "MLP.__init__", "norm_kwargs")
        )
        lin_kwargs = per_layer_kwargs(layer_kwargs, len(sizes) + 1, "MLP.__init__", "layer_kwargs")
        out_shape = (out_features,) if isinstance(out_features, int) else tuple(out_features)
        widths = [*sizes, math.prod(out_shape)]
        layers: list[nn.Module] = []
        prev = in_features
        for i, width in enumerate(widths):
            last = i == len(sizes)
            kwargs = lin_kwargs[i]
            bias = bool(kwargs.pop("bias", bias_last_layer if last else True))
            shared = last and single_bias_last_layer and bias
            layers.append(_linear(layer_class, prev, width, bias and not shared, kwargs, device))
            if shared:
                layers.append(SharedBias(device=device))
            if not last or activate_last_layer:
                layers.extend(self._post(i, width, activation_class, norm_class, dropout, device))
            prev = width
        super().__init__(*layers)
        self.in_features = in_features
        self.out_features = out_features if isinstance(out_features, int) else out_shape
        self.depth = len(sizes)
        self.num_cells = sizes
        self._out_shape = None if isinstance(out_features, int) else out_shape

    def _post(
        self,
        i: int,
        width: int,
        activation_class: Callable[..., nn.Module],
        norm_class: Callable[..., nn.Module] | None,
        dropout: float | None,
        device: DeviceLike,
    ) -> list[nn.Module]:
        mods: list[nn.Module] = []
        if dropout is not None:
            mods.append(nn.Dropout(p=dropout))
        if norm_class is not None:
            if self._norm_kwargs is None:
                mods.append(build_on_device(norm_class, device, width))
            else:
                mods.append(build_on_device(norm_class, device, **self._norm_kwargs[i]))
        mods.append(build_on_device(activation_class, device, **self._act_kwargs[i]))
        return mods

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Concatenates the inputs along the last dim and applies the layers."""
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        for layer in self:
            x = layer(x)
        if self._out_shape is not None:
            x = x.view(*x.shape[:-1], *self._out_shape)
        return x


def _linear(
    layer_class: Callable[..., nn.Module],
    in_f: int | None,
    out_f: int,
    bias: bool,
    kwargs: dict[str, Any],
    device: DeviceLike,
) -> nn.Module:
    if layer_class is nn.Linear:
        if in_f is None:
            return nn.LazyLinear(out_f, bias=bias, device=device, **kwargs)
        return nn.Linear(in_f, out_f, bias=bias, device=device, **kwargs)
    if in_f is None:
        raise ValueError(
            f"MLP.__init__: a lazy first layer needs layer_class=nn.Linear (got"
            f" layer_class={layer_class!r} and in_features=None; expected an int in_features)."
            " Pass in_features."
        )
    return build_on_device(layer_class, device, in_f, out_f, bias=bias, **kwargs)
