"""GRUModule: a GRU that reads and writes its hidden state in the TensorDict."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.utils import NestedKey
from torch import nn

from tdrl.modules.rnn._args import check_options, resolve_keys, resolve_sizes
from tdrl.modules.rnn._base import RecurrentModuleBase, States

__all__ = ["GRUModule"]

DeviceLike = torch.device | str | None


class GRUModule(RecurrentModuleBase):
    """A GRU whose hidden state lives in the data; same contract as :class:`LSTMModule`.

    One state entry, ``state_key`` (default ``"recurrent_state"``), of shape
    ``[*B, num_layers, hidden_size]``. In sequence mode a GRU's hidden state is its output,
    so the per-step states come straight from the fused kernel.

    Args:
        gru: an ``nn.GRU`` (``batch_first=True``, unidirectional) whose parameters are used.
        in_keys: ``[input, state_key]``, optionally followed by the episode-start key.
        out_keys: ``[output, next_state_key]``.
        state_key: tdrl: the hidden-state entry with ``in_key`` (in place of
            :class:`LSTMModule`'s ``state_keys``; default ``"recurrent_state"``).
        The other arguments are those of :class:`LSTMModule` (TorchRL's, in its order; a GRU
        has no ``proj_size``).

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
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0,
        bidirectional: bool = False,
        python_based: bool = False,
        recurrent_backend: str = "pad",
        recurrent_compute_dtype: torch.dtype = torch.float32,
        recurrent_recompute: str = "none",
        recurrent_matmul_precision: str = "auto",
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: DeviceLike = None,
        gru: nn.GRU | None = None,
        default_recurrent_mode: bool | None = None,
        state_key: NestedKey | None = None,
        is_init_key: NestedKey | None = None,
    ) -> None:
        owner = "GRUModule.__init__"
        check_options(
            owner,
            batch_first=batch_first,
            bidirectional=bidirectional,
            python_based=python_based,
            recurrent_backend=recurrent_backend,
            recurrent_compute_dtype=recurrent_compute_dtype,
            recurrent_recompute=recurrent_recompute,
            recurrent_matmul_precision=recurrent_matmul_precision,
        )
        sizes = resolve_sizes(
            owner,
            nn.GRU,
            gru,
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bias=bias,
            dropout=dropout,
        )
        keys = resolve_keys(
            owner,
            default_states=("recurrent_state",),
            in_key=in_key,
            in_keys=in_keys,
            out_key=out_key,
            out_keys=out_keys,
            state_keys=None if state_key is None else (state_key,),
            is_init_key=is_init_key,
        )
        super().__init__(
            sizes[0],
            sizes[1],
            keys=keys,
            num_layers=sizes[2],
            bias=sizes[3],
            dropout=sizes[4],
            device=device,
            rnn=nn.GRU,
            instance=gru,
            default_recurrent_mode=default_recurrent_mode,
        )
        self.recurrent_backend = recurrent_backend

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
