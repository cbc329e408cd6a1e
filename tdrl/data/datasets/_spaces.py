"""Specs of the JSON space descriptions Minari stores (``minari.serialization`` format).

The mapping is TorchRL's (``MinariExperienceReplay.metadata``): ``Box`` -> ``Unbounded`` when
every bound is infinite, else ``Bounded``; ``Discrete`` -> ``Categorical(n)`` of shape ``()``;
``Dict`` -> ``Composite``. tdrl also maps ``MultiDiscrete`` -> ``MultiCategorical`` and
``MultiBinary`` -> ``Binary`` (TorchRL raises). Spaces it cannot describe (``Text``, ``Tuple``)
become ``None``, as TorchRL's ``Text``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    TensorSpec,
    Unbounded,
)

__all__ = ["space_json_to_spec"]

_DTYPES = {
    name: getattr(torch, name)
    for name in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}


def _dtype(name: Any) -> torch.dtype:
    dtype = _DTYPES.get(str(name))
    if dtype is None:
        raise ValueError(
            f"space_json_to_spec: unsupported dtype (got {name!r}; expected one of "
            f"{sorted(_DTYPES)}). Record the dataset with a space of a numeric dtype."
        )
    return dtype


def space_json_to_spec(space: Any) -> TensorSpec | None:
    """The tdrl spec of a space described as Minari serialises it (``None`` for ``Text``/``Tuple``).

    Examples:
        >>> space_json_to_spec({"type": "Discrete", "dtype": "int64", "start": 0, "n": 3}).n
        3
        >>> box = {"type": "Box", "dtype": "float32", "shape": [2],
        ...        "low": [-1.0, -1.0], "high": [1.0, 1.0]}
        >>> type(space_json_to_spec(box)).__name__
        'Bounded'
    """
    if space is None or not isinstance(space, dict):
        return None
    kind = space.get("type")
    if kind == "Dict":
        subspaces = {k: space_json_to_spec(v) for k, v in space["subspaces"].items()}
        return Composite({k: v for k, v in subspaces.items() if v is not None})
    if kind == "Box":
        dtype, shape = _dtype(space["dtype"]), tuple(space["shape"])
        low = torch.as_tensor(space["low"], dtype=torch.float64).reshape(shape)
        high = torch.as_tensor(space["high"], dtype=torch.float64).reshape(shape)
        if bool((low == -math.inf).all()) and bool((high == math.inf).all()):
            return Unbounded(shape, dtype=dtype)
        return Bounded(low.to(dtype), high.to(dtype), shape=shape, dtype=dtype)
    if kind == "Discrete":
        return Categorical(int(space["n"]), shape=(), dtype=_dtype(space.get("dtype", "int64")))
    if kind == "MultiDiscrete":
        return MultiCategorical(list(space["nvec"]), dtype=_dtype(space.get("dtype", "int64")))
    if kind == "MultiBinary":
        n = space["n"]
        return Binary(shape=tuple(n) if isinstance(n, list) else (int(n),))
    return None
