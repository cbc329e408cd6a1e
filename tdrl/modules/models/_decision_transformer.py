"""DecisionTransformer: a causal GPT-2-style transformer over (return, state, action) tokens.

TorchRL builds its ``DecisionTransformer`` on HuggingFace's ``GPT2Model``; tdrl writes the same
network in plain PyTorch (no ``transformers`` dependency): the same configuration fields, the
same token layout, the same GPT-2 blocks (pre-LayerNorm, causal self-attention, MLP), the same
learned position embedding over the ``3 * T`` tokens and the same initialisation. The
parameters are laid out as GPT-2's (``transformer.wpe``, ``transformer.h.<i>.attn.c_attn``, ...,
with ``nn.Linear`` weights, i.e. GPT-2's ``Conv1D`` weights transposed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tdrl.modules.models._layers import DeviceLike

__all__ = ["DecisionTransformer"]

# GPT-2's defaults that TorchRL leaves as they are (it does not set them in GPT2Config).
_EMBD_PDROP = 0.1
_LN_EPS = 1e-5
_INIT_STD = 0.02

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}


@dataclasses.dataclass
class DTConfig:
    """The transformer's configuration (TorchRL's ``DecisionTransformer.DTConfig``).

    Attributes:
        n_embd: hidden size (every token's width).
        n_layer: number of transformer blocks.
        n_head: attention heads per block (``n_embd`` must be divisible by it).
        n_inner: hidden size of each block's MLP (``None``: ``4 * n_embd``, as GPT-2).
        activation: the MLP's activation, a GPT-2 name (``"relu"``, ``"gelu"``,
            ``"gelu_new"``, ``"silu"``, ``"tanh"``, ...).
        n_positions: the most tokens a sequence may have (``3 *`` the context length).
        resid_pdrop: dropout after attention and MLP (before each residual sum).
        attn_pdrop: dropout of the attention weights.

    Examples:
        >>> DTConfig(n_embd=128)
        DTConfig(n_embd: 128, n_layer: 4, n_head: 4, n_inner: 1024, activation: relu, n_positions: 1024, resid_pdrop: 0.1, attn_pdrop: 0.1)
    """

    n_embd: Any = 256
    n_layer: Any = 4
    n_head: Any = 4
    n_inner: Any = 1024
    activation: Any = "relu"
    n_positions: Any = 1024
    resid_pdrop: Any = 0.1
    attn_pdrop: Any = 0.1

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}: {getattr(self, f.name)}" for f in dataclasses.fields(self))
        return f"{type(self).__name__}({fields})"


def config_dict(config: Any, where: str) -> dict[str, Any]:
    """``config`` (a :class:`DTConfig`, a mapping, ``None``) as a dict with every field."""
    if config is None:
        config = DTConfig()
    if isinstance(config, DTConfig):
        return dataclasses.asdict(config)
    if not isinstance(config, Mapping):
        try:
            config = dict(config)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"{where}: config is not a DTConfig or a mapping (got {type(config).__name__}; "
                "expected DecisionTransformer.DTConfig(...) or a dict of its fields). Pass "
                "DecisionTransformer.default_config() or a dict."
            ) from err
    fields = [f.name for f in dataclasses.fields(DTConfig)]
    missing = [name for name in fields if name not in config]
    if missing:
        raise KeyError(
            f"{where}: config misses {missing} (got keys {sorted(config)}; expected every "
            f"DTConfig field: {fields}). Start from dataclasses.asdict(DTConfig())."
        )
    return dict(config)


class _SelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, attn_pdrop: float, resid_pdrop: float) -> None:
        super().__init__()
        self.n_head = n_head
        self.attn_pdrop = attn_pdrop
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=-1)
        heads = (b, t, self.n_head, c // self.n_head)
        q, k, v = (z.view(heads).transpose(1, 2) for z in (q, k, v))
        p = self.attn_pdrop if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class _MLP(nn.Module):
    def __init__(self, n_embd: int, n_inner: int, activation: str, resid_pdrop: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_inner)
        self.c_proj = nn.Linear(n_inner, n_embd)
        self.act = _ACTIVATIONS[activation]
        self.dropout = nn.Dropout(resid_pdrop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class _Block(nn.Module):
    def __init__(self, cfg: dict[str, Any], n_inner: int) -> None:
        super().__init__()
        n_embd = cfg["n_embd"]
        self.ln_1 = nn.LayerNorm(n_embd, eps=_LN_EPS)
        self.attn = _SelfAttention(n_embd, cfg["n_head"], cfg["attn_pdrop"], cfg["resid_pdrop"])
        self.ln_2 = nn.LayerNorm(n_embd, eps=_LN_EPS)
        self.mlp = _MLP(n_embd, n_inner, cfg["activation"], cfg["resid_pdrop"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class _GPT2(nn.Module):
    """GPT-2's body fed with embeddings: position embedding, blocks, final LayerNorm."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        n_embd, n_layer = cfg["n_embd"], cfg["n_layer"]
        n_inner = cfg["n_inner"] if cfg["n_inner"] is not None else 4 * n_embd
        self.n_positions = cfg["n_positions"]
        self.wpe = nn.Embedding(self.n_positions, n_embd)
        self.drop = nn.Dropout(_EMBD_PDROP)
        self.h = nn.ModuleList(_Block(cfg, n_inner) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=_LN_EPS)
        self._init_weights(n_layer)

    @torch.no_grad()
    def _init_weights(self, n_layer: int) -> None:
        # GPT-2's scheme: N(0, 0.02) weights, zero biases, residual projections scaled down.
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                module.weight.normal_(0.0, _INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.zero_()
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                param.normal_(0.0, _INIT_STD / math.sqrt(2 * n_layer))

    def forward(self, embeds: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(embeds.shape[-2], device=embeds.device)
        x = self.drop(embeds + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)  # type: ignore[no-any-return]


_Config = DTConfig  # the name DTConfig is a class attribute inside DecisionTransformer


class DecisionTransformer(nn.Module):
    """The Decision Transformer's body (TorchRL's signature, config and outputs).

    Each step ``t`` of a sequence of length ``T`` becomes three tokens ``(R_t, s_t, a_t)``
    (return-to-go, observation, action), each embedded by its own linear layer; the ``3 * T``
    tokens go through a LayerNorm and a causal GPT-2 transformer (learned position embedding
    per token, pre-LayerNorm blocks). The output is the hidden state of every observation
    token: it has seen ``R_0..R_t``, ``s_0..s_t`` and ``a_0..a_{t-1}`` (never ``a_t`` or anything
    later), so a head on it predicts ``a_t``.

    Args:
        state_dim: observation size.
        action_dim: action size.
        config: a :class:`DTConfig` or a dict of its fields (default
            :meth:`default_config`: 256 wide, 4 layers, 4 heads, MLP 1024, relu, 1024
            positions, dropouts 0.1).
        device: where the parameters are created.

    Inputs of ``forward``: ``observation [*B, T, state_dim]``, ``action [*B, T, action_dim]``
    and ``return_to_go [*B, T, 1]``; the output is ``[*B, T, n_embd]``. ``3 * T`` must not
    exceed ``n_positions``. As with TorchRL (GPT-2), the token embeddings also go through a
    dropout of 0.1 in training mode.

    Examples:
        >>> config = DecisionTransformer.DTConfig(n_embd=32, n_layer=1, n_head=2, n_inner=64)
        >>> model = DecisionTransformer(state_dim=4, action_dim=2, config=config)
        >>> out = model(torch.randn(3, 10, 4), torch.randn(3, 10, 2), torch.randn(3, 10, 1))
        >>> out.shape
        torch.Size([3, 10, 32])
    """

    DTConfig = DTConfig

    @classmethod
    def default_config(cls) -> _Config:
        """TorchRL's default configuration (a new :class:`DTConfig`)."""
        return DTConfig()

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: dict[str, Any] | _Config | None = None,
        device: DeviceLike = None,
    ) -> None:
        where = "DecisionTransformer.__init__"
        cfg = config_dict(config, where)
        _check_config(cfg, where)
        super().__init__()
        self.state_dim = int(state_dim)
        self.action_dim = int(action_dim)
        self.hidden_size = int(cfg["n_embd"])
        with torch.device(device) if device is not None else nullcontext():
            self.transformer = _GPT2(cfg)
            self.embed_return = nn.Linear(1, self.hidden_size)
            self.embed_state = nn.Linear(self.state_dim, self.hidden_size)
            self.embed_action = nn.Linear(self.action_dim, self.hidden_size)
            self.embed_ln = nn.LayerNorm(self.hidden_size)

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> torch.Tensor:
        """Hidden states of the observation tokens, ``[*B, T, n_embd]``."""
        self._check_inputs(observation, action, return_to_go)
        batch, length = observation.shape[:-2], observation.shape[-2]
        tokens = torch.stack(
            (
                self.embed_return(return_to_go),
                self.embed_state(observation),
                self.embed_action(action),
            ),
            dim=-2,
        )  # [*B, T, 3, H]: R_t, s_t, a_t next to each other
        tokens = self.embed_ln(tokens.reshape(-1, 3 * length, self.hidden_size))
        hidden = self.transformer(tokens).view(-1, length, 3, self.hidden_size)
        return hidden[:, :, 1].reshape(*batch, length, self.hidden_size)

    def _check_inputs(self, obs: torch.Tensor, action: torch.Tensor, rtg: torch.Tensor) -> None:
        where = "DecisionTransformer.forward"
        expected = {"observation": self.state_dim, "action": self.action_dim, "return_to_go": 1}
        for name, value in zip(expected, (obs, action, rtg)):
            if value.ndim < 2 or value.shape[-1] != expected[name]:
                raise ValueError(
                    f"{where}: {name} has shape {tuple(value.shape)} (expected [*B, T, "
                    f"{expected[name]}]). Pass sequences with the time dim before the features."
                )
        if not obs.shape[:-1] == action.shape[:-1] == rtg.shape[:-1]:
            raise ValueError(
                f"{where}: the inputs' leading dims differ (got observation "
                f"{tuple(obs.shape)}, action {tuple(action.shape)}, return_to_go "
                f"{tuple(rtg.shape)}; expected the same [*B, T]). Pass aligned sequences."
            )
        tokens = 3 * obs.shape[-2]
        if tokens > self.transformer.n_positions:
            raise ValueError(
                f"{where}: the sequence is too long (got T={obs.shape[-2]}, {tokens} tokens; "
                f"expected 3 * T <= n_positions={self.transformer.n_positions}). Shorten the "
                "context or raise config.n_positions."
            )


def _check_config(cfg: dict[str, Any], where: str) -> None:
    if cfg["activation"] not in _ACTIVATIONS:
        raise ValueError(
            f"{where}: unknown activation {cfg['activation']!r} (expected one of "
            f"{sorted(_ACTIVATIONS)}). Use a GPT-2 activation name."
        )
    if cfg["n_embd"] % cfg["n_head"]:
        raise ValueError(
            f"{where}: n_embd is not divisible by n_head (got n_embd={cfg['n_embd']}, "
            f"n_head={cfg['n_head']}; expected n_embd % n_head == 0). Change one of them."
        )
