"""Serialise what a scenario returns into plain JSON that both libraries produce alike.

A scenario returns tensors, TensorDicts, specs, dicts/lists of them, scalars, strings, or an
exception. Encoded forms (every one a dict with one tag key, plain values as themselves):

- tensor: ``{"tensor": {"shape", "dtype", "values"}}`` (values for up to ``MAX_VALUES``
  elements, else ``"stats"``: sum, absolute sum, min, max, in float64);
- TensorDict: ``{"td": {"batch_size", "entries": {"a/b": leaf}}}`` (nested keys joined by ``/``);
- spec: ``{"spec": {"cls", "shape", "dtype", ...}}``, TorchRL's alias classes folded into theirs
  (``UnboundedContinuous`` -> ``Unbounded``: the README's allowed deviation);
- exception: ``{"error": {"kind", "type", "msg"}}`` (``kind`` is the first built-in class in its MRO);
- ``{"dict": {...}}``, ``{"list": [...]}``, ``{"repr": "..."}`` for other objects (their type name).
"""

from __future__ import annotations

import math
from typing import Any

import torch

MAX_VALUES = 96
SPEC_ALIASES = {
    "UnboundedContinuous": "Unbounded",
    "UnboundedDiscrete": "Unbounded",
    "BoundedContinuous": "Bounded",
    "BoundedDiscrete": "Bounded",
}


def _float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def encode_tensor(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach().cpu()
    out: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    flat = t.reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    if t.dtype == torch.bool:
        flat = flat.to(torch.int64)
    if flat.numel() <= MAX_VALUES:
        values = flat.tolist()
        out["values"] = [_float(v) if isinstance(v, float) else v for v in values]
    else:
        f = flat.to(torch.float64)
        finite = f[torch.isfinite(f)]
        out["stats"] = {
            "sum": _float(finite.sum().item()),
            "abs": _float(finite.abs().sum().item()),
            "min": _float(f.min().item()),
            "max": _float(f.max().item()),
            "nonfinite": int((~torch.isfinite(f)).sum().item()),
        }
    return {"tensor": out}


def _is_td(x: Any) -> bool:
    return any(c.__name__ == "TensorDictBase" for c in type(x).__mro__)


def _is_spec(x: Any) -> bool:
    return any(c.__name__ == "TensorSpec" for c in type(x).__mro__)


def encode_td(td: Any) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for key in td.keys(include_nested=True, leaves_only=True, is_leaf=_td_leaf):
        path = "/".join(key) if isinstance(key, tuple) else key
        entries[path] = encode(td.get(key))
    return {"td": {"batch_size": list(td.batch_size), "entries": dict(sorted(entries.items()))}}


def _td_leaf(cls: type) -> bool:
    names = {c.__name__ for c in cls.__mro__}
    if "NonTensorData" in names or "NonTensorStack" in names:
        return True
    return "TensorDictBase" not in names


def encode_spec(spec: Any) -> dict[str, Any]:
    name = type(spec).__name__
    name = SPEC_ALIASES.get(name, name)
    out: dict[str, Any] = {"cls": name, "shape": list(spec.shape)}
    if name in ("Composite", "StackedComposite"):
        out["entries"] = {
            "/".join(k) if isinstance(k, tuple) else k: encode_spec(spec[k])
            for k in sorted(spec.keys(), key=str)
            if spec[k] is not None
        }
        return {"spec": out}
    out["dtype"] = str(spec.dtype).replace("torch.", "")
    space = getattr(spec, "space", None)
    for attr in ("low", "high"):
        value = getattr(space, attr, None)
        if isinstance(value, torch.Tensor):
            out[attr] = encode_tensor(value)
    for attr in ("n", "nvec"):
        value = getattr(space, attr, None)
        if value is not None:
            out[attr] = encode(value)
    return {"spec": out}


def encode(x: Any) -> Any:
    """The JSON form of ``x`` (see the module docstring)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return _float(x)
    if isinstance(x, BaseException):
        kind = next(c.__name__ for c in type(x).__mro__ if c.__module__ == "builtins")
        return {"error": {"kind": kind, "type": type(x).__name__, "msg": str(x)[:400]}}
    if isinstance(x, torch.Size):
        return list(x)
    if isinstance(x, torch.dtype):
        return str(x).replace("torch.", "")
    if isinstance(x, torch.Tensor):
        return encode_tensor(x)
    if _is_td(x):
        if type(x).__name__ in ("NonTensorData",):
            return {"nontensor": encode(x.data)}
        if type(x).__name__ in ("NonTensorStack",):
            return {"nontensor": encode(x.tolist())}
        return encode_td(x)
    if _is_spec(x):
        return encode_spec(x)
    if isinstance(x, dict):
        return {"dict": {str(k): encode(v) for k, v in x.items()}}
    if isinstance(x, (list, tuple)):
        return {"list": [encode(v) for v in x]}
    if hasattr(x, "tolist") and hasattr(x, "dtype"):  # numpy
        return encode(torch.as_tensor(x))
    return {"repr": type(x).__name__}
