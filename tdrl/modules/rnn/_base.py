"""Shared machinery of the recurrent modules: keys, step mode and sequence mode."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torch.nn import functional as F

from tdrl.modules.rnn._args import RecurrentKeys, share_weights
from tdrl.modules.rnn._global import _MODE
from tdrl.modules.rnn._segments import Segments

if TYPE_CHECKING:
    from tdrl.envs.transforms import TensorDictPrimer
from tdrl.specs import Composite, Unbounded

__all__ = ["RecurrentModuleBase"]

States = tuple[torch.Tensor, ...]


class RecurrentModuleBase(TensorDictModuleBase):
    """Base of :class:`LSTMModule` and :class:`GRUModule` (see their docs for the contract).

    The base builds one single-layer ``batch_first`` ``rnn`` per layer (so that the state of
    every layer is known at every step); subclasses implement :meth:`_run_layer` (a fused run) and
    :meth:`_layer_states` (the states after every step of a sequence).

    Examples:
        >>> from tdrl.modules import GRUModule, LSTMModule
        >>> [isinstance(m, RecurrentModuleBase) for m in (
        ...     LSTMModule(2, 3, in_key="x", out_key="y"), GRUModule(2, 3, in_key="x", out_key="y"))]
        [True, True]
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        keys: RecurrentKeys,
        num_layers: int,
        dropout: float,
        bias: bool,
        device: torch.device | str | None,
        rnn: type[nn.LSTM] | type[nn.GRU],
        instance: nn.Module | None = None,
        default_recurrent_mode: bool | None = None,
    ) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.dropout = dropout
        if instance is not None:
            device = next(instance.parameters()).device
        sizes = [input_size] + [hidden_size] * (num_layers - 1)
        self.layers = nn.ModuleList(
            rnn(s, hidden_size, bias=bias, batch_first=True, device=device) for s in sizes
        )
        if instance is not None:
            share_weights(self.layers, instance)
        self.in_key, self.out_key, self.is_init_key = keys.in_key, keys.out_key, keys.is_init_key
        self.state_keys, self.out_state_keys = keys.state_keys, keys.out_state_keys
        self.in_keys = cast(list[Any], [keys.in_key, *keys.state_keys, keys.is_init_key])
        self.out_keys = cast(list[Any], [keys.out_key, *keys.out_state_keys])
        self._recurrent_mode = bool(default_recurrent_mode)

    # ------------------------------------------------------------------ mode
    @property
    def recurrent_mode(self) -> bool:
        """Whether the module runs over sequences (``True``) or single steps (``False``).

        A global :func:`~tdrl.modules.set_recurrent_mode` block (as losses open) decides;
        outside one, the mode given to :meth:`set_recurrent_mode` (``False`` by default).
        """
        mode = _MODE.get()
        return self._recurrent_mode if mode is None else mode

    def set_recurrent_mode(self, mode: bool = True) -> RecurrentModuleBase:
        """Switches between step mode (``False``) and sequence mode (``True``); returns self.

        To switch every recurrent module of a policy for a block of code, use the context
        manager :func:`tdrl.modules.set_recurrent_mode` instead.

        Examples:
            >>> from tdrl.modules import GRUModule
            >>> GRUModule(2, 3, in_key="x", out_key="y").set_recurrent_mode(True).recurrent_mode
            True
        """
        self._recurrent_mode = bool(mode)
        return self

    # ------------------------------------------------------------------ specs
    def recurrent_state_spec(self) -> Composite:
        """The spec of the hidden-state entries: one ``[num_layers, hidden_size]`` per key.

        Examples:
            >>> from tdrl.modules import LSTMModule
            >>> spec = LSTMModule(2, 3, in_key="x", out_key="y", num_layers=2).recurrent_state_spec()
            >>> spec.zero((4,))["recurrent_state_c"].shape
            torch.Size([4, 2, 3])
        """
        shape = (self.num_layers, self.hidden_size)
        spec = Composite()
        for key in self.state_keys:
            spec.set(cast(Any, key), Unbounded(shape=shape))
        return spec

    def make_tensordict_primer(self) -> TensorDictPrimer:
        """The ``TensorDictPrimer`` that gives an env zero hidden states after every reset.

        Examples:
            >>> from tdrl.envs.transforms import InitTracker, TransformedEnv
            >>> from tdrl.modules import LSTMModule
            >>> from tdrl.testing import CountingEnv
            >>> lstm = LSTMModule(1, 3, in_key="observation", out_key="features")
            >>> env = TransformedEnv(CountingEnv(batch_size=(2,)), InitTracker())
            >>> env = env.append_transform(lstm.make_tensordict_primer())
            >>> env.reset()["recurrent_state_h"].shape
            torch.Size([2, 1, 3])
        """
        from tdrl.envs.transforms import TensorDictPrimer

        return TensorDictPrimer(self.recurrent_state_spec(), expand_specs=True)

    # ------------------------------------------------------------------ layers
    def _run_layer(
        self, layer: nn.Module, x: torch.Tensor, states: States
    ) -> tuple[torch.Tensor, States]:
        """Fused run of one layer over ``x`` ``[S, L, F]`` from ``states`` (each ``[S, H]``).

        Returns the output ``[S, L, H]`` and the final states (each ``[1, S, H]``).
        """
        raise NotImplementedError

    def _layer_states(
        self,
        layer: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        first: States,
        reset: torch.Tensor | None,
    ) -> States:
        """The states after every step (each ``[N, T, H]``) of one layer, in the data layout.

        ``x``/``y`` are the layer's input/output ``[N, T, *]``, ``first`` the states before
        ``t = 0`` (each ``[N, H]``) and ``reset`` the ``[N, T, 1]`` episode starts (or None).
        """
        raise NotImplementedError

    def _run(
        self, x: torch.Tensor, states: States, is_init: torch.Tensor | None
    ) -> tuple[torch.Tensor, States]:
        """All layers over ``[N, T]`` data; ``states`` ``[N, T, layers, H]`` are read at the
        starts of the segments only. Returns the output and the states after every step."""
        n, t = x.shape[:2]
        segments = Segments(is_init, n, t)
        reset = None if is_init is None else is_init.unsqueeze(-1)
        per_layer: list[States] = []
        packed = segments.pack(x)
        for i, layer in enumerate(self.layers):
            init = tuple(segments.initial(s[:, :, i]) for s in states)
            y_packed, final = self._run_layer(layer, packed, init)
            if t == 1:  # step mode: the final states are the states after the step
                per_layer.append(tuple(f.transpose(0, 1) for f in final))
                y = y_packed
            else:
                y = segments.unpack(y_packed)
                first = tuple(s[:, 0, i] for s in states)
                per_layer.append(self._layer_states(layer, x, y, first, reset))
            x = y
            if i + 1 < self.num_layers and self.dropout and self.training:
                x = F.dropout(x, self.dropout, training=True)
                packed = segments.pack(x)
            else:
                packed = y_packed
        if len(per_layer) == 1:
            return y, tuple(p.unsqueeze(-2) for p in per_layer[0])
        stacked = tuple(torch.stack(parts, -2) for parts in zip(*per_layer))
        return y, stacked

    # ------------------------------------------------------------------ data
    def _get_state(self, tensordict: TensorDictBase, key: NestedKey) -> torch.Tensor:
        value = tensordict.get(key, None)
        if value is None:
            name = type(self).__name__
            keys = ", ".join(map(repr, sorted(tensordict.keys(True, True), key=str)))
            raise KeyError(
                f"{name}.forward: the recurrent state {key!r} is missing from the data (got keys"
                f" [{keys}]; expected an entry of shape (*batch, {self.num_layers},"
                f" {self.hidden_size})). Add the primer to the env:"
                " env.append_transform(module.make_tensordict_primer())."
            )
        return value

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Step mode: one step per element; sequence mode: time is the last batch dim."""
        if self.recurrent_mode:
            return self._forward_sequence(tensordict)
        return self._forward_step(tensordict)

    def _forward_step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # The collection hot path: a lean version of _run for T == 1 (no segments).
        x = tensordict.get(self.in_key)
        batch = x.shape[:-1]
        n = math.prod(batch)
        layers, hidden = self.num_layers, self.hidden_size
        states = [
            self._get_state(tensordict, k).reshape(n, layers, hidden) for k in self.state_keys
        ]
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is not None:
            keep = (~is_init.reshape(n, 1, 1)).to(x.dtype)
            states = [s * keep for s in states]
        finals: list[States] = []
        y = x.reshape(n, 1, x.shape[-1])
        for i, layer in enumerate(self.layers):
            if i and self.dropout and self.training:
                y = F.dropout(y, self.dropout, training=True)
            y, final = self._run_layer(layer, y, tuple(s[:, i] for s in states))
            finals.append(final)
        tensordict.set(self.out_key, y.reshape(*batch, hidden))
        for j, key in enumerate(self.out_state_keys):
            parts = [f[j] for f in finals]  # each [1, n, H]
            new = parts[0] if layers == 1 else torch.cat(parts, 0)
            tensordict.set(key, new.transpose(0, 1).reshape(*batch, layers, hidden))
        return tensordict

    def _forward_sequence(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims < 1:
            raise ValueError(
                f"{type(self).__name__}.forward: sequence mode needs a time dim (got batch size"
                f" {tuple(tensordict.batch_size)}; expected (*batch, time)). Pass [batch, time]"
                " data or call set_recurrent_mode(False)."
            )
        x = tensordict.get(self.in_key)
        lead, t = tensordict.batch_size[:-1], tensordict.batch_size[-1]
        n = math.prod(lead)
        layers, hidden = self.num_layers, self.hidden_size
        states = tuple(
            self._get_state(tensordict, k).reshape(n, t, layers, hidden) for k in self.state_keys
        )
        is_init = tensordict.get(self.is_init_key, None)
        y, steps = self._run(
            x.reshape(n, t, x.shape[-1]), states, None if is_init is None else is_init.reshape(n, t)
        )
        tensordict.set(self.out_key, y.reshape(*lead, t, hidden))
        for key, value in zip(self.out_state_keys, steps):
            tensordict.set(key, value.reshape(*lead, t, layers, hidden))
        return tensordict

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size},"
            f" num_layers={self.num_layers}, in_key={self.in_key!r}, out_key={self.out_key!r},"
            f" recurrent_mode={self.recurrent_mode}"
        )
