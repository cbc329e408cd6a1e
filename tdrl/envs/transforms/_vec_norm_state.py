"""VecNorm's statistics in TorchRL's state-dict layout (``"_extra_state"``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict.utils import NestedKey

__all__ = ["STATS", "export_stats", "import_stats", "out_dtype", "stat_name"]

STATS = ("sum", "sumsq", "count")
_SUFFIX = {"sum": "_sum", "sumsq": "_ssq", "count": "_count"}
SEP = "-<.>-"  # TorchRL's separator of nested keys in VecNorm's state


def stat_name(key: NestedKey, stat: str) -> str:
    """TorchRL's name of a statistic of ``key``: the suffix goes on the leaf name and the
    parts of a nested key are joined with ``"-<.>-"``.

    Examples:
        >>> stat_name("observation", "sumsq"), stat_name(("agents", "obs"), "count")
        ('observation_ssq', 'agents-<.>-obs_count')
    """
    parts = (key,) if isinstance(key, str) else tuple(key)
    return SEP.join((*parts[:-1], parts[-1] + _SUFFIX[stat]))


def out_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """The dtype of normalised values (and of ``loc``/``scale``) for an entry of ``dtype``.

    Examples:
        >>> out_dtype(torch.float64), out_dtype(torch.int64)
        (torch.float64, torch.float32)
    """
    if dtype is not None and dtype.is_floating_point:
        return dtype
    return torch.float32


def export_stats(t: Any) -> dict[str, torch.Tensor] | None:
    """The statistics of VecNorm ``t`` under TorchRL's names (``None`` before any).

    Float64; a count that is the same for every feature is saved as one element, as TorchRL
    saves it (counts differ per feature when groups of agents reset apart).
    """
    out: dict[str, torch.Tensor] = {}
    for i, key in enumerate(t.in_keys):
        for stat in STATS:
            value = getattr(t, f"{stat}_{i}")
            if value is None:
                continue
            if stat == "count" and value.numel() > 1 and bool((value == value.flatten()[0]).all()):
                value = value.flatten()[:1]  # TorchRL's one-element count, when it says it all
            out[stat_name(key, stat)] = value  # never changed in place: the update replaces
    return out or None


def import_stats(t: Any, state: Any) -> None:
    """Loads what :func:`export_stats` (or TorchRL's VecNorm) wrote into VecNorm ``t``.

    TorchRL's float32 statistics and one-element counts are accepted: they become float64 and
    the count is spread over the features. The loaded tensors are copies.
    """
    where = "VecNorm.load_state_dict"
    if state is None:
        if any(getattr(t, f"count_{i}") is not None for i in range(len(t.in_keys))):
            raise KeyError(
                f"{where}: the state holds no statistics (got None; expected the "
                "'_extra_state' of a VecNorm that saw data). Load a state saved after data."
            )
        return
    if not isinstance(state, Mapping):
        raise TypeError(
            f"{where}: '_extra_state' must be a mapping of tensors (got "
            f"{type(state).__name__}). Pass what state_dict() returned."
        )
    known: set[str] = set()
    for i, key in enumerate(t.in_keys):
        names = [stat_name(key, stat) for stat in STATS]
        known.update(names)
        present = [n in state for n in names]
        if not any(present) and getattr(t, f"count_{i}") is None:
            continue  # an entry this VecNorm never saw, and neither did the saved one
        if not all(present):
            raise KeyError(
                f"{where}: statistics of {key!r} are missing (got keys {sorted(state)}; "
                f"expected {names}). Load the state of a VecNorm with the same in_keys."
            )
        _load_entry(t, i, key, [state[n] for n in names])
    unknown = sorted(set(state) - known)
    if unknown:
        raise KeyError(
            f"{where}: unknown statistics (got {unknown}; expected names built from in_keys="
            f"{t.in_keys}). Load the state of a VecNorm with the same in_keys."
        )


def _load_entry(t: Any, i: int, key: NestedKey, values: list[Any]) -> None:
    s, q, c = (torch.as_tensor(v).detach().to(torch.float64) for v in values)
    current = getattr(t, f"sum_{i}")
    if c.numel() == 1 and s.numel() != 1:
        c = c.reshape(()).expand(s.shape)
    if (
        q.shape != s.shape
        or c.shape != s.shape
        or (current is not None and current.shape != s.shape)
    ):
        want = tuple(current.shape) if current is not None else tuple(s.shape)
        raise ValueError(
            f"VecNorm.load_state_dict: the statistics of {key!r} do not have the expected "
            f"shape (got sum {tuple(s.shape)}, ssq {tuple(q.shape)}, count {tuple(c.shape)}; "
            f"expected {want}, a count of one element allowed). Load the state of a VecNorm of "
            "the same env."
        )
    device = current.device if current is not None else s.device
    for stat, value in zip(STATS, (s, q, c)):
        setattr(t, f"{stat}_{i}", value.to(device).clone())
    if i not in t._dtypes:
        t._dtypes[i] = out_dtype(torch.as_tensor(values[0]).dtype)
