"""LSTMModule: an LSTM that reads and writes its hidden states in the TensorDict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from tensordict.utils import NestedKey
from torch import nn

from tdrl.modules.rnn._args import check_options, resolve_keys, resolve_sizes
from tdrl.modules.rnn._base import RecurrentModuleBase, States

__all__ = ["LSTMModule"]

DeviceLike = torch.device | str | None


def _cell_states(
    layer: nn.LSTM,
    x: torch.Tensor,
    y: torch.Tensor,
    first: States,
    reset: torch.Tensor | None,
) -> torch.Tensor:
    """Cell state after every step, ``[N, T, H]``, rebuilt from the inputs and hidden outputs.

    The fused kernel only returns the last cell state. The gates only depend on ``x_t`` and
    ``h_{t-1}`` (both known once the kernel ran), so two matmuls give all of them and the cell
    recursion ``c_t = f_t * c_{t-1} + i_t * g_t`` is one elementwise op per step. Resets are
    folded into ``f_t`` (a zero previous state), so the recursion needs no segments.
    """
    h0, c0 = first
    n, t = y.shape[:2]
    hid = layer.hidden_size
    # Time-major rows: the per-step slices of the loop below are contiguous.
    prev = torch.empty((t, n, hid), dtype=y.dtype, device=y.device)
    prev[0] = h0
    prev[1:] = y[:, :-1].transpose(0, 1)
    keep = None if reset is None else ~reset.transpose(0, 1)  # [T, N, 1]
    if keep is not None:
        prev.mul_(keep)

    def part(name: str) -> torch.Tensor:
        return cast(torch.Tensor, getattr(layer, name))[: 3 * hid]

    x_rows = x.transpose(0, 1).reshape(t * n, x.shape[-1])
    prev_rows = prev.view(t * n, hid)
    if layer.bias:
        gates = torch.addmm(part("bias_ih_l0") + part("bias_hh_l0"), x_rows, part("weight_ih_l0").T)
    else:
        gates = x_rows @ part("weight_ih_l0").T
    gates = gates.addmm_(prev_rows, part("weight_hh_l0").T).view(t, n, 3 * hid)
    input_forget = torch.sigmoid(gates[..., : 2 * hid])
    update = input_forget[..., :hid] * torch.tanh(gates[..., 2 * hid :])
    forget = input_forget[..., hid:]
    forget = forget * keep if keep is not None else forget.contiguous()
    c = c0
    if not (update.requires_grad or c0.requires_grad):
        out = torch.empty_like(update)
        for step in range(t):
            c = torch.addcmul(update[step], forget[step], c, out=out[step])
        return out.transpose(0, 1)
    steps = []
    for step in range(t):
        c = torch.addcmul(update[step], forget[step], c)
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
    GPU); the per-step cell states are rebuilt from the gates (two matmuls and a cheap
    elementwise recursion).

    Arguments are TorchRL's, in its order; the options tdrl does not implement keep TorchRL's
    defaults and raise ``NotImplementedError`` for any other value.

    Args:
        input_size: size of the last dim of the input (not with ``lstm``).
        hidden_size: hidden size (not with ``lstm``).
        num_layers: stacked layers.
        bias: whether the layers have biases.
        batch_first: must be ``True`` (as in TorchRL): time is the last batch dim.
        dropout: dropout between layers (training only).
        proj_size: only 0 (no projection).
        bidirectional: only ``False``.
        python_based: only ``False`` (tdrl has one implementation, the fused kernel).
        recurrent_backend: ``"pad"`` (TorchRL's default: sequences cut at the resets, padded)
            or ``"auto"`` (the same here); ``"scan"``/``"triton"`` are not implemented.
        recurrent_compute_dtype: only ``torch.float32`` (TorchRL's triton option).
        recurrent_recompute: only ``"none"`` (TorchRL refuses others with ``"pad"``).
        recurrent_matmul_precision: only ``"auto"`` (TorchRL's triton option).
        in_key: the input entry; the states are then ``state_keys``. Exclusive with
            ``in_keys``.
        in_keys: ``[input, h_key, c_key]``, optionally followed by the episode-start key.
        out_key: the output entry (the last layer's hidden state); the new states go to
            ``("next", h_key)``/``("next", c_key)``. Exclusive with ``out_keys``.
        out_keys: ``[output, next_h_key, next_c_key]``.
        device: where the parameters are created.
        lstm: an ``nn.LSTM`` (``batch_first=True``, unidirectional, unprojected) whose
            parameters are used, exclusive with the size arguments.
        default_recurrent_mode: the mode outside any global ``set_recurrent_mode`` block
            (``False``, step mode, when None).
        state_keys: tdrl: the ``(h, c)`` state entries with ``in_key`` (default
            ``("recurrent_state_h", "recurrent_state_c")``).
        is_init_key: tdrl: the episode-start flag with ``in_key`` (default ``"is_init"``).

    Raises:
        ValueError: missing or conflicting keys or sizes, ``batch_first=False``.
        NotImplementedError: an option tdrl does not implement (see above).

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
        >>> wrapped = LSTMModule(lstm=nn.LSTM(3, 8, batch_first=True), in_keys=["embed", "h", "c"],
        ...                      out_keys=["features", ("next", "h"), ("next", "c")])
        >>> wrapped.in_keys
        ['embed', 'h', 'c', 'is_init']
    """

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0,
        proj_size: int = 0,
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
        lstm: nn.LSTM | None = None,
        default_recurrent_mode: bool | None = None,
        state_keys: tuple[NestedKey, NestedKey] | None = None,
        is_init_key: NestedKey | None = None,
    ) -> None:
        owner = "LSTMModule.__init__"
        check_options(
            owner,
            batch_first=batch_first,
            bidirectional=bidirectional,
            python_based=python_based,
            recurrent_backend=recurrent_backend,
            recurrent_compute_dtype=recurrent_compute_dtype,
            recurrent_recompute=recurrent_recompute,
            recurrent_matmul_precision=recurrent_matmul_precision,
            proj_size=proj_size,
        )
        sizes = resolve_sizes(
            owner,
            nn.LSTM,
            lstm,
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            bias=bias,
            dropout=dropout,
        )
        keys = resolve_keys(
            owner,
            default_states=("recurrent_state_h", "recurrent_state_c"),
            in_key=in_key,
            in_keys=in_keys,
            out_key=out_key,
            out_keys=out_keys,
            state_keys=state_keys,
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
            rnn=nn.LSTM,
            instance=lstm,
            default_recurrent_mode=default_recurrent_mode,
        )
        self.recurrent_backend = recurrent_backend

    def _run_layer(
        self, layer: nn.Module, x: torch.Tensor, states: States
    ) -> tuple[torch.Tensor, States]:
        h0, c0 = (s.unsqueeze(0).contiguous() for s in states)
        y, (h_n, c_n) = layer(x, (h0, c0))
        return y, (h_n, c_n)

    def _layer_states(
        self,
        layer: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        first: States,
        reset: torch.Tensor | None,
    ) -> States:
        return y, _cell_states(cast(nn.LSTM, layer), x, y, first, reset)
