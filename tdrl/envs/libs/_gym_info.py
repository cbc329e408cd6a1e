"""Copying selected gymnasium ``info`` entries (and ``"action_mask"``) into tdrl data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tdrl.specs import Binary, TensorSpec, Unbounded

__all__ = ["InfoReader"]


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


def _infer_dtype(value: np.ndarray, key: str) -> torch.dtype:
    kind = value.dtype.kind
    if kind == "b":
        return torch.bool
    if kind == "f":
        return torch.float32
    if kind in "iu":
        return torch.int64
    raise TypeError(
        f"GymWrapper.__init__: info entry {key!r} is not numeric (got dtype {value.dtype}; "
        "expected bool, int or float values). Drop it from info_keys or give its spec."
    )


class InfoReader:
    """Specs and per-step conversion of the info entries an env copies into its data.

    Floats become float32, integers int64 and booleans bool; ``"action_mask"`` becomes a bool
    ``Binary`` spec. Entries missing from an info dict are written as zeros.
    """

    def __init__(
        self,
        probe: Mapping[str, Any],
        info_keys: Sequence[str] | Mapping[str, TensorSpec],
        batch: torch.Size,
        device: torch.device | None,
        reserved: Sequence[str],
    ) -> None:
        self.batch = batch
        self.specs: dict[str, TensorSpec] = {}
        if isinstance(info_keys, Mapping):
            for key, spec in info_keys.items():
                self.specs[key] = spec.expand(*batch, *spec.shape).to(device)
        else:
            if isinstance(info_keys, str):
                info_keys = [info_keys]
            for key in info_keys:
                self.specs[key] = self._infer(probe, key, device)
        if "action_mask" in probe and "action_mask" not in self.specs:
            if "action_mask" not in reserved:
                mask = np.asarray(probe["action_mask"])
                self.specs["action_mask"] = Binary(
                    shape=mask.shape, device=device, dtype=torch.bool
                )
        for key in self.specs:
            if key in reserved:
                raise ValueError(
                    f"GymWrapper.__init__: info key {key!r} clashes with an observation key "
                    f"(got {key!r}; expected a key not in {sorted(reserved)}). Drop it from "
                    "info_keys."
                )
        self._plan = [
            (key, _numpy_dtype(s.dtype), s.shape, s.dtype)  # type: ignore[arg-type]
            for key, s in self.specs.items()
        ]

    def _infer(self, probe: Mapping[str, Any], key: str, device: torch.device | None) -> Unbounded:
        if key not in probe:
            raise KeyError(
                f"GymWrapper.__init__: info key {key!r} is not in the reset info (available "
                f"keys: {sorted(probe)}). Give its spec instead: info_keys={{{key!r}: spec}}."
            )
        value = np.asarray(probe[key])
        dtype = _infer_dtype(value, key)
        shape = value.shape
        if tuple(shape[: len(self.batch)]) != tuple(self.batch):
            shape = (*self.batch, *shape)
        return Unbounded(shape=shape, device=device, dtype=dtype)

    def read(self, info: Mapping[str, Any], data: dict[str, Any]) -> None:
        """Writes the tensors of every entry of the plan into ``data`` (zeros when missing)."""
        for key, np_dtype, shape, dtype in self._plan:
            value = info.get(key)
            if value is None:
                data[key] = torch.zeros(shape, dtype=dtype)
            else:
                data[key] = torch.from_numpy(np.array(value, dtype=np_dtype)).reshape(shape)

    def read_row(self, info: Mapping[str, Any], row: int, data: dict[str, Any]) -> None:
        """Like :meth:`read` for sub-env ``row`` of a vector info dict (unbatched tensors)."""
        n = len(self.batch)
        for key, np_dtype, shape, dtype in self._plan:
            present = info.get("_" + key)
            if key in info and (present is None or bool(present[row])):
                value = np.array(info[key][row], dtype=np_dtype)
                data[key] = torch.from_numpy(value).reshape(shape[n:])
            else:
                data[key] = torch.zeros(shape[n:], dtype=dtype)
