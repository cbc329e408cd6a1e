"""TorchRL's constructor arguments of the recurrent modules: keys, sizes and backend options."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from tensordict.utils import NestedKey, unravel_key
from torch import nn

__all__: list[str] = []

DEFAULT_IS_INIT = "is_init"
_BACKENDS = ("auto", "pad", "scan", "triton")
_PRECISIONS = ("auto", "fast", "high-prec", "ieee", "tf32", "tf32x3")


def _next(key: NestedKey) -> NestedKey:
    return ("next", key) if isinstance(key, str) else ("next", *cast(tuple[str, ...], key))


@dataclass(frozen=True)
class RecurrentKeys:
    """Where a recurrent module reads and writes: input, states, episode start, output."""

    in_key: NestedKey
    state_keys: tuple[NestedKey, ...]
    is_init_key: NestedKey
    out_key: NestedKey
    out_state_keys: tuple[NestedKey, ...]


def resolve_keys(
    owner: str,
    *,
    default_states: tuple[NestedKey, ...],
    in_key: NestedKey | None,
    in_keys: Sequence[NestedKey] | None,
    out_key: NestedKey | None,
    out_keys: Sequence[NestedKey] | None,
    state_keys: Sequence[NestedKey] | None,
    is_init_key: NestedKey | None,
) -> RecurrentKeys:
    """TorchRL's key rules: exactly one of ``in_key``/``in_keys`` and of ``out_key``/``out_keys``.

    ``in_keys`` is ``[input, *states]`` with an optional trailing episode-start key;
    ``out_keys`` is ``[output, *next_states]``. With ``in_key``, the states are ``state_keys``
    (default ``default_states``); with ``out_key``, the new states go to ``("next", state)``.
    """
    n = len(default_states)
    if (in_key is None) == (in_keys is None):
        raise ValueError(
            f"{owner}: give exactly one of in_key and in_keys (got in_key={in_key!r}, "
            f"in_keys={in_keys!r}; expected one). Pass e.g. in_key='observation'."
        )
    if in_keys is not None:
        keys = [unravel_key(k) for k in in_keys]
        if len(keys) not in (n + 1, n + 2):
            raise ValueError(
                f"{owner}: in_keys must be [input, {n} state key(s)] plus an optional "
                f"episode-start key (got {keys!r}; expected {n + 1} or {n + 2} keys). Pass "
                f"in_keys=['observation', {', '.join(map(repr, default_states))}]."
            )
        if state_keys is not None or is_init_key is not None:
            raise ValueError(
                f"{owner}: in_keys already names the state and episode-start keys (got also "
                f"state key(s)={state_keys!r}, is_init_key={is_init_key!r}; expected None). "
                "Drop them or use in_key instead of in_keys."
            )
        source, states = keys[0], tuple(keys[1 : n + 1])
        is_init = keys[n + 1] if len(keys) == n + 2 else DEFAULT_IS_INIT
    else:
        source = unravel_key(cast(NestedKey, in_key))
        states = tuple(unravel_key(k) for k in (state_keys or default_states))
        is_init = DEFAULT_IS_INIT if is_init_key is None else unravel_key(is_init_key)
        if len(states) != n:
            raise ValueError(
                f"{owner}: wrong number of state keys (got {states!r}; expected {n})."
                f" Pass {n} key(s)."
            )
    if (out_key is None) == (out_keys is None):
        raise ValueError(
            f"{owner}: give exactly one of out_key and out_keys (got out_key={out_key!r}, "
            f"out_keys={out_keys!r}; expected one). Pass e.g. out_key='features'."
        )
    if out_keys is not None:
        outs = [unravel_key(k) for k in out_keys]
        if len(outs) != n + 1:
            raise ValueError(
                f"{owner}: out_keys must be [output, {n} next-state key(s)] (got {outs!r}; "
                f"expected {n + 1} keys). Pass e.g. ['features', "
                f"{', '.join(repr(_next(k)) for k in states)}]."
            )
        target, out_states = outs[0], tuple(outs[1:])
    else:
        target, out_states = unravel_key(cast(NestedKey, out_key)), tuple(map(_next, states))
    return RecurrentKeys(source, states, is_init, target, out_states)


def check_options(
    owner: str,
    *,
    batch_first: bool,
    bidirectional: bool,
    python_based: bool,
    recurrent_backend: str,
    recurrent_compute_dtype: torch.dtype,
    recurrent_recompute: str,
    recurrent_matmul_precision: str,
    proj_size: int = 0,
) -> None:
    """Refuses the TorchRL options tdrl does not implement (their defaults are what it does)."""
    if not batch_first:
        raise ValueError(
            f"{owner}: batch_first must be True (got False; expected True, as TorchRL requires):"
            " time is the last batch dim of the data. Drop batch_first."
        )
    if recurrent_backend not in _BACKENDS:
        raise ValueError(
            f"{owner}: unknown recurrent_backend (got {recurrent_backend!r}; expected one of "
            f"{_BACKENDS}). Pass 'pad'."
        )
    if recurrent_recompute not in ("none", "full"):
        raise ValueError(
            f"{owner}: unknown recurrent_recompute (got {recurrent_recompute!r}; expected "
            "'none' or 'full'). Pass 'none'."
        )
    if recurrent_matmul_precision not in _PRECISIONS:
        raise ValueError(
            f"{owner}: unknown recurrent_matmul_precision (got {recurrent_matmul_precision!r}; "
            f"expected one of {_PRECISIONS}). Pass 'auto'."
        )
    refused: dict[str, Any] = {}
    if proj_size:
        refused["proj_size"] = proj_size
    if bidirectional:
        refused["bidirectional"] = bidirectional
    if python_based:
        refused["python_based"] = python_based
    if recurrent_backend not in ("pad", "auto"):
        refused["recurrent_backend"] = recurrent_backend
    if recurrent_compute_dtype != torch.float32:
        refused["recurrent_compute_dtype"] = recurrent_compute_dtype
    if recurrent_recompute != "none":
        refused["recurrent_recompute"] = recurrent_recompute
    if recurrent_matmul_precision != "auto":
        refused["recurrent_matmul_precision"] = recurrent_matmul_precision
    if refused:
        name, value = next(iter(refused.items()))
        raise NotImplementedError(
            f"{owner}: {name} is not supported (got {name}={value!r}; expected TorchRL's "
            "default). tdrl runs unidirectional, unprojected layers with one backend: sequences "
            "cut at the resets and run padded through the fused kernel (TorchRL's 'pad'; "
            "'auto' is accepted for it). Leave the option at its default."
        )


def resolve_sizes(
    owner: str,
    kind: type[nn.LSTM] | type[nn.GRU],
    instance: nn.Module | None,
    *,
    input_size: int | None,
    hidden_size: int | None,
    num_layers: int,
    bias: bool,
    dropout: float,
) -> tuple[int, int, int, bool, float]:
    """``(input_size, hidden_size, num_layers, bias, dropout)``, from the arguments or an instance.

    A given ``nn.LSTM``/``nn.GRU`` instance is exclusive with the size arguments (TorchRL) and
    must be batch-first, unidirectional and unprojected.
    """
    name = kind.__name__
    if instance is None:
        if input_size is None or hidden_size is None:
            raise ValueError(
                f"{owner}: input_size and hidden_size are required without an nn.{name} instance"
                f" (got input_size={input_size!r}, hidden_size={hidden_size!r}; expected two "
                f"positive ints). Pass them, or the {name.lower()}= instance to wrap."
            )
        return int(input_size), int(hidden_size), int(num_layers), bool(bias), float(dropout)
    if not isinstance(instance, kind):
        raise TypeError(
            f"{owner}: {name.lower()} must be an nn.{name} (got {type(instance).__name__}; "
            f"expected torch.nn.{name}). Pass e.g. torch.nn.{name}(3, 8, batch_first=True)."
        )
    if input_size is not None or hidden_size is not None:
        raise ValueError(
            f"{owner}: an nn.{name} instance cannot be passed with input_size/hidden_size (got "
            f"input_size={input_size!r}, hidden_size={hidden_size!r}; expected None). Drop them."
        )
    given = {"num_layers": (num_layers, 1), "bias": (bias, True), "dropout": (dropout, 0)}
    for arg, (value, default) in given.items():
        if value != default and value != getattr(instance, arg):
            raise ValueError(
                f"{owner}: {arg} differs from the nn.{name} instance's (got {arg}={value!r}, "
                f"the instance has {getattr(instance, arg)!r}; expected the default or the "
                f"same value). Drop {arg}: it is taken from the instance."
            )
    check_options(
        owner,
        batch_first=bool(instance.batch_first),
        bidirectional=bool(instance.bidirectional),
        python_based=False,
        recurrent_backend="pad",
        recurrent_compute_dtype=torch.float32,
        recurrent_recompute="none",
        recurrent_matmul_precision="auto",
        proj_size=int(getattr(instance, "proj_size", 0)),
    )
    return (
        int(instance.input_size),
        int(instance.hidden_size),
        int(instance.num_layers),
        bool(instance.bias),
        float(instance.dropout),
    )


def share_weights(layers: nn.ModuleList, instance: nn.Module) -> None:
    """Makes each single-layer module use the parameters of layer ``i`` of ``instance``."""
    for i, layer in enumerate(layers):
        for name in cast(list[str], layer._flat_weights_names):
            # RNNBase.__setattr__ also refreshes the flat weights the fused kernel reads.
            setattr(layer, name, getattr(instance, name[: -len("l0")] + f"l{i}"))
