"""How a collected batch travels from a collector actor to the driver.

Ray serialises a TensorDict of CPU tensors through pickle: every tensor is copied into a byte
string by the actor and rebuilt by the driver. Numpy arrays are Ray's fast path instead: the
actor writes them into the object store once, and the driver reads them without a copy. A batch
therefore travels as its keys and numpy views of its leaves (:class:`PackedBatch`); the driver
rebuilds a TensorDict on the object-store memory and copies it once into memory it owns (the
copy every collector makes anyway, so that the caller owns what it receives).

A batch that is not plain (a leaf off the CPU, a dtype numpy lacks, non-tensor data, a lazy
stack) travels as it is.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["PackedBatch", "pack", "unpack"]


@dataclass
class PackedBatch:
    """A batch as its leaf keys, numpy views of its leaves and its batch size."""

    keys: list[Any]
    arrays: list[np.ndarray]
    batch_size: tuple[int, ...]


def pack(batch: Any) -> Any:
    """The batch to return from an actor: a :class:`PackedBatch` when every leaf is a CPU
    tensor numpy can view, else the batch itself.

    Examples:
        >>> td = TensorDict({"a": torch.zeros(2, 3), "next": {"b": torch.ones(2)}}, [2])
        >>> packed = pack(td)
        >>> packed.keys, packed.batch_size
        (['a', ('next', 'b')], (2,))
    """
    if type(batch) is not TensorDict or batch.device not in (None, torch.device("cpu")):
        return batch
    keys, arrays = [], []
    for key, leaf in batch.items(True, True):
        if type(leaf) is not torch.Tensor or leaf.device.type != "cpu" or leaf.requires_grad:
            return batch
        try:
            array = leaf.numpy()  # shares the leaf's memory
        except TypeError:  # a dtype numpy lacks (bfloat16, float8, ...)
            return batch
        keys.append(key)
        arrays.append(array)
    return PackedBatch(keys, arrays, tuple(batch.batch_size))


def unpack(payload: Any) -> TensorDictBase:
    """The TensorDict of an actor's answer. A :class:`PackedBatch` comes back as a TensorDict
    on the arrays' memory (the object store's, read-only): the caller copies it before handing
    it out.

    Examples:
        >>> td = TensorDict({"a": torch.arange(3)}, [3])
        >>> unpack(pack(td))["a"].tolist()
        [0, 1, 2]
    """
    if not isinstance(payload, PackedBatch):
        return payload
    out = TensorDict(batch_size=payload.batch_size)
    with warnings.catch_warnings():
        # object-store arrays are read-only; the tensors are only read (copied) afterwards
        warnings.simplefilter("ignore", UserWarning)
        for key, array in zip(payload.keys, payload.arrays):
            out.set(key, torch.from_numpy(array))
    return out
