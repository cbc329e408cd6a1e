"""GRUModule: a GRU that reads and writes its hidden state in the TensorDict."""

from __future__ import annotations

import torch
from tensordict.utils import NestedKey
from torch import nn

from tdrl.modules.rnn._base import RecurrentModuleBase, States

__all__ = ["GRUModule"]

DeviceLike = torch.device | str | None


class GRUModule(RecurrentModuleBase):
    """A GRU whose hidden state lives in the data; same contract as :class:`LSTMModule`.

    One state entry, ``state_key`` (default ``"recurrent_state"``), of shape
    ``[*B, num_layers, hidden_size]``. In sequence mode a GRU's hidden state is its output,
    so the per-step states come straight from the fused kernel.

    Args:
        state_key: the hidden-state entry (in place of :class:`LSTMModule`'s ``state_keys``).
        The other arguments are those of :class:`LSTMModule`.

    Examples:
        >>> from tensordict import TensorDict
        >>> gru = GRUModule(3, 8, in_key=("agent", "embed"), out_key=("agent", "features"))
        >>> td = TensorDict(batch_size=[4])
        >>> td["agent", "embed"] = torch.randn(4, 3)
        >>> gru(td)
        Traceback (most recent call last):
        ...
        KeyError: "GRUModule.forward: the recurrent state 'recurrent_state' is missing ..."
        >>> td["recurrent_state"] = torch.zeros(4, 1, 8)
        >>> gru(td)["next", "recurrent_state"].shape
        torch.Size([4, 1, 8])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        in_key: NestedKey,
        out_key: NestedKey,
        num_layers: int = 1,
        dropout: float = 0.0,
        bias: bool = True,
        state_key: NestedKey = "recurrent_state",
        is_init_key: NestedKey = "is_init",
        device: DeviceLike = None,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            in_key=in_key,
            out_key=out_key,
            state_keys=(state_key,),
            num_layers=num_layers,
            dropout=dropout,
            bias=bias,
            is_init_key=is_init_key,
            device=device,
            rnn=nn.GRU,
        )

    def _run_layer(
        self, layer: nn.Module, x: torch.Tensor, states: States
    ) -> tuple[torch.Tensor, States]:
        (h0,) = states
        y, h_n = layer(x, h0.unsqueeze(0).contiguous())
        return y, (h_n,)

    def _layer_states(
        self,
        layer: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        first: States,
        reset: torch.Tensor | None,
    ) -> States:
        return (y,)  # a GRU's hidden state is its output
