"""DTActor and OnlineDTActor: the Decision Transformer with an action head (TorchRL's)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tdrl.modules.models._decision_transformer import DecisionTransformer, DTConfig, config_dict
from tdrl.modules.models._layers import DeviceLike

__all__ = ["DTActor", "OnlineDTActor"]

_LOG_STD_MIN, _LOG_STD_MAX = -5.0, 2.0


def _actor_config() -> DTConfig:
    return DTConfig(
        n_embd=512,
        n_layer=4,
        n_head=4,
        n_inner=2048,
        activation="relu",
        n_positions=1024,
        resid_pdrop=0.1,
        attn_pdrop=0.1,
    )


def _head(n_embd: int, action_dim: int, device: DeviceLike) -> nn.Linear:
    layer = nn.Linear(n_embd, action_dim, device=device)
    nn.init.orthogonal_(layer.weight.data)
    layer.bias.data.zero_()
    return layer


class DTActor(nn.Module):
    """Decision Transformer actor: one linear head on the observation tokens (TorchRL's).

    ``forward(observation, action, return_to_go)`` returns ``[*B, T, action_dim]``: the action
    predicted at every step (unbounded; TorchRL's scripts squash it with a ``TanhDelta``
    distribution in a :class:`~tdrl.modules.ProbabilisticActor`). The head has an orthogonal
    weight and a zero bias, as in TorchRL.

    Args:
        state_dim: observation size.
        action_dim: action size.
        transformer_config: the transformer's :class:`DecisionTransformer.DTConfig` or dict
            (default :meth:`default_config`: 512 wide, 4 layers, 4 heads, MLP 2048).
        device: where the parameters are created.

    Examples:
        >>> config = DTActor.default_config()
        >>> config.n_embd, config.n_inner = 32, 64
        >>> actor = DTActor(state_dim=4, action_dim=2, transformer_config=config)
        >>> actor(torch.randn(3, 10, 4), torch.randn(3, 10, 2), torch.randn(3, 10, 1)).shape
        torch.Size([3, 10, 2])
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: dict[str, Any] | DTConfig | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        cfg = config_dict(
            self.default_config() if transformer_config is None else transformer_config,
            "DTActor.__init__",
        )
        self.transformer = DecisionTransformer(state_dim, action_dim, cfg, device=device)
        self.action_layer = _head(cfg["n_embd"], action_dim, device)

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> torch.Tensor:
        """The predicted actions, ``[*B, T, action_dim]``."""
        return self.action_layer(self.transformer(observation, action, return_to_go))  # type: ignore[no-any-return]

    @classmethod
    def default_config(cls) -> DTConfig:
        """TorchRL's actor configuration: 512 wide, 4 layers, 4 heads, MLP 2048."""
        return _actor_config()


class OnlineDTActor(nn.Module):
    """Online Decision Transformer actor: Gaussian head on the observation tokens (TorchRL's).

    ``forward(observation, action, return_to_go)`` returns ``(mu, std)``, each
    ``[*B, T, action_dim]``; ``log std`` is ``tanh`` of a linear head mapped onto
    ``[-5, 2]``, so ``std`` lies in ``[exp(-5), exp(2)]``. Use it with ``TanhNormal`` in a
    :class:`~tdrl.modules.ProbabilisticActor` (``out_keys=["loc", "scale"]``).

    Args:
        state_dim: observation size.
        action_dim: action size.
        transformer_config: the transformer's config (default :meth:`default_config`).
        device: where the parameters are created.

    Examples:
        >>> config = OnlineDTActor.default_config()
        >>> config.n_embd, config.n_inner = 32, 64
        >>> actor = OnlineDTActor(state_dim=4, action_dim=2, transformer_config=config)
        >>> mu, std = actor(torch.randn(3, 10, 4), torch.randn(3, 10, 2), torch.randn(3, 10, 1))
        >>> mu.shape, bool((std >= torch.exp(torch.tensor(-5.0))).all())
        (torch.Size([3, 10, 2]), True)
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        transformer_config: dict[str, Any] | DTConfig | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        cfg = config_dict(
            self.default_config() if transformer_config is None else transformer_config,
            "OnlineDTActor.__init__",
        )
        self.transformer = DecisionTransformer(state_dim, action_dim, cfg, device=device)
        self.action_layer_mean = _head(cfg["n_embd"], action_dim, device)
        self.action_layer_logstd = _head(cfg["n_embd"], action_dim, device)
        self.log_std_min, self.log_std_max = _LOG_STD_MIN, _LOG_STD_MAX

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, std)`` of the action at every step."""
        hidden = self.transformer(observation, action, return_to_go)
        mu = self.action_layer_mean(hidden)
        squashed = torch.tanh(self.action_layer_logstd(hidden))  # in [-1, 1]
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (squashed + 1)
        return mu, log_std.exp()

    @classmethod
    def default_config(cls) -> DTConfig:
        """TorchRL's actor configuration: 512 wide, 4 layers, 4 heads, MLP 2048."""
        return _actor_config()
