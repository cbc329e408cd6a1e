"""Dueling Q-networks (Wang et al. 2016): a shared trunk, then value and advantage heads.

``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``: subtracting the mean advantage makes the split
identifiable. The constructors, defaults and sub-module names (``features``, ``advantage``,
``value``) are TorchRL's, so state dicts carry across.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from tdrl.modules.models._conv import ConvNet
from tdrl.modules.models._layers import DeviceLike
from tdrl.modules.models._mlp import MLP

__all__ = ["DuelingCnnDQNet", "DuelingMlpDQNet"]


def _head_kwargs(owner: str, name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """TorchRL's head defaults (one 512-cell ELU hidden layer) updated with ``given``."""
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(
            f"{owner}.__init__: {name} must be a dict of MLP arguments (got"
            f" {type(given).__name__}; expected a dict or None). Pass e.g. {{'num_cells': 256}}."
        )
    if given is not None and "out_features" in given:
        raise ValueError(
            f"{owner}.__init__: {name} sets out_features (got {given['out_features']!r}; expected"
            " no out_features: the heads' sizes are out_features and out_features_value). Drop it"
            f" from {name}."
        )
    return {
        "depth": 1,
        "activation_class": nn.ELU,
        "num_cells": 512,
        "bias_last_layer": True,
        **(given or {}),
    }


def _zero_known_biases(module: nn.Module) -> None:
    """Zeroes the biases of every built linear/conv layer (as TorchRL).

    Lazy layers are skipped: PyTorch initialises their bias when they first see an input, so
    theirs come out random, exactly as in TorchRL's dueling networks.
    """
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d | nn.Linear) and not isinstance(
            layer, nn.modules.lazy.LazyModuleMixin
        ):
            if isinstance(layer.bias, torch.Tensor):
                nn.init.zeros_(layer.bias)


def _dueling(value: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """``value + advantage - advantage.mean(-1)``, with ``value`` broadcast over the action dims.

    With a multi-dim ``out_features`` the advantage has more trailing dims than the value; the
    value is viewed ``[*batch, 1, ..., out_features_value]`` so it broadcasts per sample.
    """
    extra = advantage.ndim - value.ndim
    if extra > 0:
        value = value.reshape(*value.shape[:-1], *([1] * extra), value.shape[-1])
    return value + advantage - advantage.mean(dim=-1, keepdim=True)


class DuelingCnnDQNet(nn.Module):
    """Dueling Q-network over pixels: a ConvNet trunk, then MLP value and advantage heads.

    Args:
        out_features: number of actions (the advantage head's output size).
        out_features_value: the value head's output size. Defaults to ``1``.
        cnn_kwargs: :class:`ConvNet` arguments updating TorchRL's defaults
            ``{"num_cells": [32, 64, 64], "strides": [4, 2, 1], "kernel_sizes": [8, 4, 3]}``
            (ELU activations, a lazy first layer, the spatial dims flattened at the end).
        mlp_kwargs: :class:`MLP` arguments of both heads, updating TorchRL's defaults
            ``{"depth": 1, "activation_class": nn.ELU, "num_cells": 512, "bias_last_layer": True}``.
        device: where the layers are created.

    The biases of the non-lazy layers start at zero (TorchRL's rule); the lazy first layers
    get PyTorch's default initialisation when they first see an input.

    Raises:
        TypeError: ``cnn_kwargs``/``mlp_kwargs`` not a dict.
        ValueError: ``mlp_kwargs`` sets ``out_features``.

    Examples:
        >>> net = DuelingCnnDQNet(out_features=4)
        >>> net(torch.zeros(2, 3, 64, 64)).shape
        torch.Size([2, 4])
        >>> net(torch.zeros(5, 2, 3, 64, 64)).shape  # any leading batch dims
        torch.Size([5, 2, 4])
    """

    def __init__(
        self,
        out_features: int,
        out_features_value: int = 1,
        cnn_kwargs: dict | None = None,
        mlp_kwargs: dict | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        if cnn_kwargs is not None and not isinstance(cnn_kwargs, Mapping):
            raise TypeError(
                f"DuelingCnnDQNet.__init__: cnn_kwargs must be a dict of ConvNet arguments (got"
                f" {type(cnn_kwargs).__name__}; expected a dict or None). Pass e.g."
                " {'num_cells': [16, 32]}."
            )
        conv = {"num_cells": [32, 64, 64], "strides": [4, 2, 1], "kernel_sizes": [8, 4, 3]}
        self.features = ConvNet(device=device, **{**conv, **(cnn_kwargs or {})})
        head = _head_kwargs("DuelingCnnDQNet", "mlp_kwargs", mlp_kwargs)
        self.out_features = out_features
        self.out_features_value = out_features_value
        self.advantage = MLP(out_features=out_features, device=device, **head)
        self.value = MLP(out_features=out_features_value, device=device, **head)
        _zero_known_biases(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values ``[*batch, out_features]`` of pixels ``[*batch, C, H, W]``."""
        features = self.features(x)
        # The advantage head runs first: lazy heads materialise (draw their weights) in
        # TorchRL's order, so a seeded build gives TorchRL's weights.
        advantage = self.advantage(features)
        return _dueling(self.value(features), advantage)


class DuelingMlpDQNet(nn.Module):
    """Dueling Q-network over vectors: an MLP trunk, then MLP value and advantage heads.

    Args:
        out_features: number of actions, or a shape (the advantage head's output is then viewed
            ``[*batch, *out_features]`` and the mean is taken over its last dim).
        out_features_value: the value head's output size. Defaults to ``1``.
        mlp_kwargs_feature: :class:`MLP` arguments of the trunk, updating TorchRL's defaults
            ``{"num_cells": [256, 256], "out_features": 256, "activation_class": nn.ELU,
            "activate_last_layer": True}``.
        mlp_kwargs_output: :class:`MLP` arguments of both heads, updating TorchRL's defaults
            ``{"depth": 1, "activation_class": nn.ELU, "num_cells": 512, "bias_last_layer": True}``.
        device: where the layers are created.

    The biases of the non-lazy layers start at zero (TorchRL's rule); the lazy first layers
    get PyTorch's default initialisation when they first see an input.

    Raises:
        TypeError: ``mlp_kwargs_feature``/``mlp_kwargs_output`` not a dict.
        ValueError: ``mlp_kwargs_output`` sets ``out_features``.

    Examples:
        >>> net = DuelingMlpDQNet(out_features=3)
        >>> net(torch.zeros(8, 5)).shape
        torch.Size([8, 3])
        >>> DuelingMlpDQNet(out_features=(3, 2))(torch.zeros(8, 5)).shape
        torch.Size([8, 3, 2])
    """

    def __init__(
        self,
        out_features: int | Sequence[int],
        out_features_value: int = 1,
        mlp_kwargs_feature: dict | None = None,
        mlp_kwargs_output: dict | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        if mlp_kwargs_feature is not None and not isinstance(mlp_kwargs_feature, Mapping):
            raise TypeError(
                "DuelingMlpDQNet.__init__: mlp_kwargs_feature must be a dict of MLP arguments"
                f" (got {type(mlp_kwargs_feature).__name__}; expected a dict or None). Pass"
                " e.g. {'num_cells': [64, 64]}."
            )
        trunk = {
            "num_cells": [256, 256],
            "out_features": 256,
            "activation_class": nn.ELU,
            "activate_last_layer": True,
            **(mlp_kwargs_feature or {}),
        }
        self.features = MLP(device=device, **trunk)
        head = _head_kwargs("DuelingMlpDQNet", "mlp_kwargs_output", mlp_kwargs_output)
        self.out_features = out_features
        self.out_features_value = out_features_value
        self.advantage = MLP(out_features=out_features, device=device, **head)
        self.value = MLP(out_features=out_features_value, device=device, **head)
        _zero_known_biases(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values ``[*batch, *out_features]`` of inputs ``[*batch, in_features]``."""
        features = self.features(x)
        # The advantage head runs first: lazy heads materialise (draw their weights) in
        # TorchRL's order, so a seeded build gives TorchRL's weights.
        advantage = self.advantage(features)
        return _dueling(self.value(features), advantage)
