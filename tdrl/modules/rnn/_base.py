"""Shared machinery of the recurrent modules: keys, step mode and sequence mode."""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torch.nn import functional as F

from tdrl.modules.rnn._segments import Segments
from tdrl.specs import Composite, Unbounded

__all__ = ["RecurrentModuleBase"]

States = tuple[torch.Tensor, ...]


def _next(key: NestedKey) -> NestedKey:
    return ("next", key) if isinstance(key, str) else ("next", *cast(tuple[str, ...], key))


class RecurrentModuleBase(TensorDictModuleBase):
    """Base of :class:`LSTMModule` and :class:`GRUModule` (see their docs).

    Subclasses build one single-layer ``batch_first`` RNN per layer (so that the state of
    every layer is known at every step) and implement :meth:`_run_layer`.
    """

    _state_names: tuple[str, ...] = ()

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        in_key: NestedKey,
        out_key: NestedKey,
        state_keys: tuple[NestedKey, ...],
        num_layers: int,
        dropout: float,
        is_init_key: NestedKey,
        layers: list[nn.Module],
    ) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.dropout = dropout
        self.layers = nn.ModuleList(layers)
        self.in_key, self.out_key, self.is_init_key = in_key, out_key, is_init_key
        self.state_keys = state_keys
        self.in_keys = cast(list[Any], [in_key, *state_keys, is_init_key])
        self.out_keys = cast(list[Any], [out_key, *(_next(k) for k in state_keys)])
        self._recurrent_mode = False

    # ------------------------------------------------------------------ mode
    @property
    def recurrent_mode(self) -> bool:
        """Whether the module runs over sequences (``True``) or single steps (``False``)."""
        return self._recurrent_mode

    def set_recurrent_mode(self, mode: bool = True) -> RecurrentModuleBase:
        """Switches between step mode (``False``) and sequence mode (``True``); returns self."""
        self._recurrent_mode = bool(mode)
        return self

    # ------------------------------------------------------------------ specs
    def recurrent_state_spec(self) -> Composite:
        """The spec of the hidden-state entries: one ``[num_layers, hidden_size]`` per key."""
        shape = (self.num_layers, self.hidden_size)
        spec = Composite()
        for key in self.state_keys:
            spec.set(cast(Any, key), Unbounded(shape=shape))
        return spec

    def make_tensordict_primer(self) -> Any:
        """The ``TensorDictPrimer`` that adds the zero hidden states to an env's data."""
        from tdrl.envs import transforms

        primer_cls = getattr(transforms, "TensorDictPrimer", None)
        if primer_cls is None:
            raise NotImplementedError(
                f"{type(self).__name__}.make_tensordict_primer: tdrl.envs.transforms has no"
                " TensorDictPrimer yet (got None; expected the transform class). Until it lands,"
                " write zero states of recurrent_state_spec() into the data after each reset."
            )
        return primer_cls(self.recurrent_state_spec())

    # ------------------------------------------------------------------ layers
    def _run_layer(
        self, layer: nn.Module, x: torch.Tensor, states: States
    ) -> tuple[torch.Tensor, States]:
        """Runs one layer over ``x`` ``[S, L, F]`` from ``states`` (each ``[S, H]``).

        Returns the output ``[S, L, H]`` and the state after every step (each ``[S, L, H]``).
        """
        raise NotImplementedError

    def _run(self, x: torch.Tensor, states: States) -> tuple[torch.Tensor, States]:
        """All layers: states are ``[S, num_layers, H]``; per-step states ``[S, L, layers, H]``."""
        per_layer: list[States] = []
        for i, layer in enumerate(self.layers):
            if i and self.dropout and self.training:
                x = F.dropout(x, self.dropout, training=True)
            x, steps = self._run_layer(layer, x, tuple(s[:, i] for s in states))
            per_layer.append(steps)
        stacked = tuple(torch.stack(parts, -2) for parts in zip(*per_layer))
        return x, stacked

    # ------------------------------------------------------------------ data
    def _get_state(self, tensordict: TensorDictBase, key: NestedKey) -> torch.Tensor:
        value = tensordict.get(key, None)
        if value is None:
            name = type(self).__name__
            raise KeyError(
                f"{name}.forward: the recurrent state {key!r} is missing from the data (got keys"
                f" [{', '.join(map(repr, sorted(tensordict.keys(True, True), key=str)))}]; expected an entry of shape"
                f" (*batch, {self.num_layers}, {self.hidden_size})). Add the primer to the env:"
                " env.append_transform(module.make_tensordict_primer())."
            )
        return value

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Step mode: one step per element; sequence mode: time is the last batch dim."""
        if self._recurrent_mode:
            return self._forward_sequence(tensordict)
        return self._forward_step(tensordict)

    def _forward_step(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = tensordict.get(self.in_key)
        batch = x.shape[:-1]
        n = math.prod(batch)
        states = tuple(
            self._get_state(tensordict, k).reshape(n, self.num_layers, self.hidden_size)
            for k in self.state_keys
        )
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is not None:
            reset = is_init.reshape(n, 1, 1)
            states = tuple(s.masked_fill(reset, 0.0) for s in states)
        y, new = self._run(x.reshape(n, 1, x.shape[-1]), states)
        tensordict.set(self.out_key, y.reshape(*batch, self.hidden_size))
        for key, value in zip(self.state_keys, new):
            tensordict.set(_next(key), value.reshape(*batch, self.num_layers, self.hidden_size))
        return tensordict

    def _forward_sequence(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.batch_dims < 1:
            raise ValueError(
                f"{type(self).__name__}.forward: sequence mode needs a time dim (got batch size"
                f" {tuple(tensordict.batch_size)}; expected (*batch, time)). Pass [batch, time]"
                " data or call set_recurrent_mode(False)."
            )
        x = tensordict.get(self.in_key)
        t = tensordict.batch_size[-1]
        lead = tensordict.batch_size[:-1]
        n = math.prod(lead)
        is_init = tensordict.get(self.is_init_key, None)
        segments = Segments(None if is_init is None else is_init.reshape(n, t), n, t)
        states = tuple(
            segments.initial(
                self._get_state(tensordict, k).reshape(n, t, self.num_layers, self.hidden_size)
            )
            for k in self.state_keys
        )
        y, steps = self._run(segments.pack(x.reshape(n, t, x.shape[-1])), states)
        tensordict.set(self.out_key, segments.unpack(y).reshape(*lead, t, self.hidden_size))
        shape = (*lead, t, self.num_layers, self.hidden_size)
        for key, value in zip(self.state_keys, steps):
            tensordict.set(_next(key), segments.unpack(value).reshape(shape))
        return tensordict

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size},"
            f" num_layers={self.num_layers}, in_key={self.in_key!r}, out_key={self.out_key!r},"
            f" recurrent_mode={self._recurrent_mode}"
        )
