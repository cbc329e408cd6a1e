"""LSTMModule: an LSTM that reads and writes its hidden states in the TensorDict."""

from __future__ import annotations

from typing import cast

import torch
from tensordict.utils import NestedKey
from torch import nn
from torch.nn import functional as F

from tdrl.modules.rnn._base import RecurrentModuleBase, States

__all__ = ["LSTMModule"]

DeviceLike = torch.device | str | None


def _cell_states(
    layer: nn.LSTM, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Cell state after every step, ``[S, L, H]``, from the inputs and the hidden outputs.

    The fused kernel only returns the last cell state; the gates only depend on ``x_t`` and
    ``h_{t-1}`` (both known), so one batched matmul gives every gate and the cell recursion
    ``c_t = f_t * c_{t-1} + i_t * g_t`` is a cheap elementwise loop over time.
    """
    h = layer.hidden_size
    prev = torch.cat([h0.unsqueeze(1), y[:, :-1]], 1)

    def part(name: str) -> torch.Tensor:
        return cast(torch.Tensor, getattr(layer, name))[: 3 * h]

    w_ih, w_hh = part("weight_ih_l0"), part("weight_hh_l0")
    b_ih = part("bias_ih_l0") if layer.bias else None
    b_hh = part("bias_hh_l0") if layer.bias else None
    gates = F.linear(x, w_ih, b_ih) + F.linear(prev, w_hh, b_hh)
    i, f, g = gates.transpose(0, 1).chunk(3, -1)  # time-major: contiguous per-step slices
    update = (torch.sigmoid(i) * torch.tanh(g)).contiguous()
    forget = torch.sigmoid(f).contiguous()
    c = c0
    if not (update.requires_grad or c0.requires_grad):
        out = torch.empty_like(update)
        for t in range(update.shape[0]):
            c = torch.addcmul(update[t], forget[t], c, out=out[t])
        return out.transpose(0, 1)
    steps = []
    for t in range(update.shape[0]):
        c = torch.addcmul(update[t], forget[t], c)
        steps.append(c)
    return torch.stack(steps, 1)


class LSTMModule(RecurrentModuleBase):
    """An LSTM whose hidden states live in the data, for policies and value networks.

    **Step mode** (default, for collection): reads ``in_key`` ``[*B, input_size]`` and the
    states ``state_keys`` ``[*B, num_layers, hidden_size]``, zeroes the states where
    ``is_init_key`` (``[*B, 1]``, from ``InitTracker``; absent = no reset) is true, writes the
    output ``out_key`` ``[*B, hidden_size]`` and the new states under ``("next", key)`` so that
    ``step_mdp`` carries them to the next step. A missing state raises a ``KeyError`` that
    says to add the primer (``env.append_transform(module.make_tensordict_primer())``); states
    are never silently created.

    **Sequence mode** (``set_recurrent_mode(True)``, for training on ``[*B, T]`` data, time the
    last batch dim): gives exactly what stepping through time would give, outputs and states
    after every step, including resets where ``is_init`` is true mid-sequence. The stored
    states are only read at ``t = 0`` (and are zeroed at resets). Sequences are cut at the
    resets and the pieces run as one padded batch through the fused LSTM kernel (cuDNN on
    GPU); the per-step cell states are rebuilt from the gates.

    Args:
        input_size: size of the last dim of ``in_key``.
        hidden_size: hidden size.
        in_key: the input entry.
        out_key: the output entry (the last layer's hidden state).
        num_layers: stacked layers.
        dropout: dropout between layers (training only).
        bias: whether the layers have biases.
        state_keys: the ``(h, c)`` state entries.
        is_init_key: the episode-start flag.
        device: where the parameters are created.

    Examples:
        >>> from tensordict import TensorDict
        >>> lstm = LSTMModule(3, 8, in_key="embed", out_key="features", num_layers=2)
        >>> td = TensorDict(batch_size=[4])
        >>> td["embed"] = torch.randn(4, 3)
        >>> td.update(lstm.recurrent_state_spec().zero((4,)))
        TensorDict(...)
        >>> out = lstm(td)
        >>> out["features"].shape, out["next", "recurrent_state_c"].shape
        (torch.Size([4, 8]), torch.Size([4, 2, 8]))
        >>> seq = TensorDict(embed=torch.randn(4, 10, 3), batch_size=[4, 10])
        >>> seq.update(lstm.recurrent_state_spec().zero((4, 10)))
        TensorDict(...)
        >>> lstm.set_recurrent_mode(True)(seq)["features"].shape
        torch.Size([4, 10, 8])
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
        state_keys: tuple[NestedKey, NestedKey] = ("recurrent_state_h", "recurrent_state_c"),
        is_init_key: NestedKey = "is_init",
        device: DeviceLike = None,
    ) -> None:
        sizes = [input_size] + [hidden_size] * (num_layers - 1)
        layers: list[nn.Module] = [
            nn.LSTM(s, hidden_size, bias=bias, batch_first=True, device=device) for s in sizes
        ]
        super().__init__(
            input_size,
            hidden_size,
            in_key=in_key,
            out_key=out_key,
            state_keys=tuple(state_keys),
            num_layers=num_layers,
            dropout=dropout,
            is_init_key=is_init_key,
            layers=layers,
        )

    def _run_layer(
        self, layer: nn.Module, x: torch.Tensor, states: States
    ) -> tuple[torch.Tensor, States]:
        h0, c0 = states
        y, (h_n, c_n) = layer(x, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous()))
        if x.shape[1] == 1:
            return y, (h_n.transpose(0, 1), c_n.transpose(0, 1))
        return y, (y, _cell_states(cast(nn.LSTM, layer), x, h0, c0, y))
