"""TorchRL's ``H5StorageCheckpointer``: a buffer checkpoint whose storage is one HDF5 file.

``dumps`` writes the usual checkpoint folder, with the storage's tensors in
``storage/<checkpoint_file>`` (one dataset per leaf under ``data/``, the layout as a JSON
attribute) instead of raw ``.memmap`` files. ``loads`` reads either kind. Reading an HDF5 file is
as guarded as the rest of a checkpoint: no pickle, no link followed (external and soft links,
external raw storage and virtual datasets are refused), numeric datasets only, sizes checked
against the layout before anything is read; every problem is a ``CheckpointError`` naming the
file. ``h5py`` is an optional dependency (``pip install tdrl[h5]``).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdrl.errors import CheckpointError

from ._safe_io import MAX_JSON_BYTES, read_json_bytes

__all__ = ["H5StorageCheckpointer", "read_h5_storage", "write_h5_storage"]

FORMAT = "tdrl.h5_storage"
VERSION = 1
#: the largest ratio of a dataset's size to the file size (a compressed "bomb" is refused).
MAX_EXPANSION = 1024
_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,99}")
# Dtypes numpy cannot hold are stored as a same-size integer view.
_VIEWS = {torch.bfloat16: torch.int16}
_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    )
}


def _h5py(where: str, path: Path | None = None) -> Any:
    try:
        import h5py
    except ImportError as err:
        got = f"{path} is an HDF5 checkpoint" if path is not None else "H5StorageCheckpointer"
        raise CheckpointError(
            f"{where}: h5py is not installed (got {got}; expected the h5py package). Install "
            "it with pip install tdrl[h5]."
        ) from err
    return h5py


class H5StorageCheckpointer:
    """Makes ``dumps`` write the buffer's storage as one HDF5 file (TorchRL's class name).

    Give it to the buffer (``ReplayBuffer(checkpointer=H5StorageCheckpointer())``) or to the
    storage (``storage.checkpointer = H5StorageCheckpointer()``). The rest of the checkpoint
    (sampler, writer, generator) is written as always. Unlike TorchRL's, the data is stored
    as it is in the storage (TorchRL first packs TED data into trajectories), so its
    ``done_keys``/``reward_keys`` and packing options are accepted only at their defaults.

    Args:
        checkpoint_file: the file name inside the checkpoint's ``storage`` folder.
        done_keys, reward_keys: TorchRL's packing options; only ``None``.
        h5_kwargs: keyword arguments of ``h5py.Group.create_dataset`` for every dataset (for
            instance ``{"compression": "gzip"}``).

    Examples:
        >>> import tempfile
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), checkpointer=H5StorageCheckpointer())
        >>> _ = rb.extend({"obs": torch.arange(4.0)})
        >>> path = tempfile.mkdtemp()
        >>> rb.dumps(path)
        >>> sorted(p.name for p in (Path(path) / "storage").iterdir())
        ['checkpoint.h5', 'meta.json']
        >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10))
        >>> rb2.loads(path)
        >>> rb2[:]["obs"]
        tensor([0., 1., 2., 3.])
    """

    def __init__(
        self,
        *,
        checkpoint_file: str = "checkpoint.h5",
        done_keys: Any = None,
        reward_keys: Any = None,
        h5_kwargs: dict[str, Any] | tuple[tuple[str, Any], ...] | None = None,
        **kwargs: Any,
    ) -> None:
        where = "H5StorageCheckpointer.__init__"
        if not isinstance(checkpoint_file, str) or not _NAME.fullmatch(checkpoint_file):
            raise ValueError(
                f"{where}: invalid checkpoint_file (got {checkpoint_file!r}; expected a plain "
                "file name of letters, digits, '.', '_' and '-'). Pass a name such as "
                "'checkpoint.h5'."
            )
        packing = {"done_keys": done_keys, "reward_keys": reward_keys, **kwargs}
        given = {k: v for k, v in packing.items() if v is not None}
        if given:
            raise ValueError(
                f"{where}: TorchRL's trajectory-packing options are not supported (got "
                f"{given!r}; expected none). tdrl stores the data as it is in the storage; "
                "leave them out."
            )
        self.checkpoint_file = checkpoint_file
        self.kwargs = dict(h5_kwargs or {})
        _h5py(where)

    def __repr__(self) -> str:
        return f"H5StorageCheckpointer(checkpoint_file={self.checkpoint_file!r})"

    def marker(self) -> dict[str, Any]:
        """What the checkpoint's ``storage/meta.json`` records in place of the tensors."""
        return {"checkpointer": "h5", "file": self.checkpoint_file}


def _leaves(node: dict[str, Any], prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in node.items():
        if isinstance(value, dict):
            out += _leaves(value, (*prefix, key))
        else:
            out.append(((*prefix, key), value))
    return out


def write_h5_storage(
    path: Path, state: dict[str, Any], checkpointer: H5StorageCheckpointer
) -> None:
    """Writes a tensor storage's ``state_dict`` as the HDF5 file ``path`` (fsynced)."""
    h5py = _h5py("H5StorageCheckpointer.dumps")
    meta = {k: v for k, v in state.items() if k != "data"}
    with h5py.File(path, "w") as f:
        f.attrs["format"], f.attrs["version"] = FORMAT, VERSION
        f.attrs["meta"] = json.dumps(meta)
        data = f.create_group("data")
        for keys, tensor in _leaves(state.get("data", {}), ()):
            group = data
            for key in keys[:-1]:
                group = group.require_group(key)
            flat = tensor.detach().cpu().contiguous()
            flat = flat.view(_VIEWS.get(flat.dtype, flat.dtype))
            dataset = group.create_dataset(keys[-1], data=flat.numpy(), **checkpointer.kwargs)
            dataset.attrs["dtype"] = str(tensor.dtype).removeprefix("torch.")
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fail(where: str, path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"{where}: {path} is not a valid HDF5 storage ({what}). The checkpoint is corrupted or "
        "hostile; dump again."
    )


def read_h5_storage(path: Path, where: str, max_elements: int) -> dict[str, Any]:
    """Reads a storage ``state_dict`` written by :func:`write_h5_storage`.

    Args:
        path: the HDF5 file (already checked to be a regular file inside the checkpoint).
        where: ``"<Class>.<method>"`` for error messages.
        max_elements: the most elements the loading storage can hold; larger layouts are
            refused before any dataset is read.

    Raises:
        CheckpointError: naming ``path`` for anything unexpected.
    """
    h5py = _h5py(where, path)
    size = path.stat().st_size
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as err:
        raise _fail(where, path, f"unreadable: {err}") from err
    with f:
        if f.attrs.get("format") != FORMAT or f.attrs.get("version") != VERSION:
            raise _fail(where, path, "missing or unknown format attributes")
        meta = _meta(f, path, where)
        lead = _lead(meta, path, where, max_elements)
        data: dict[str, Any] = {}
        if lead is not None:
            _read_group(h5py, f, "data", data, lead, (size, path, where))
    return {**meta, "data": data} if lead is not None else meta


def _meta(f: Any, path: Path, where: str) -> dict[str, Any]:
    raw = f.attrs.get("meta")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    if not isinstance(raw, str) or len(raw) > MAX_JSON_BYTES:
        raise _fail(where, path, "missing or oversized layout attribute")
    meta = read_json_bytes(raw.encode(), path, where)
    if not isinstance(meta, dict) or "data" in meta:
        raise _fail(where, path, "the layout attribute is not a storage layout")
    return meta


def _lead(
    meta: dict[str, Any], path: Path, where: str, max_elements: int
) -> tuple[int, ...] | None:
    """The leading dims every dataset must have, ``None`` for an empty storage."""
    if meta.get("initialized") is not True:
        return None
    filled, env = meta.get("filled"), meta.get("env_shape")
    if not isinstance(env, list):
        raise _fail(where, path, f"invalid env shape {env!r}")
    dims: list[Any] = [filled, *env]
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise _fail(where, path, f"invalid fill level or env shape {filled!r}, {env!r}")
    # An ndim > 1 storage rounds max_size up to whole steps of every env.
    bound = max_elements + max(math.prod(dims[1:]), 1) - 1
    if math.prod(dims) > bound:
        raise _fail(
            where, path, f"{math.prod(dims)} elements, more than this storage holds ({bound})"
        )
    return tuple(dims)


def _read_group(
    h5py: Any,
    group: Any,
    name: str,
    out: dict[str, Any],
    lead: tuple[int, ...],
    ctx: tuple[Any, ...],
) -> None:
    _size, path, where = ctx
    link = group.get(name, getlink=True)
    if not isinstance(link, h5py.HardLink):
        raise _fail(where, path, f"{name!r} is a {type(link).__name__}, not a group of the file")
    node = group[name]
    if not isinstance(node, h5py.Group):
        raise _fail(where, path, f"{name!r} is not a group")
    for key in node:
        child_link = node.get(key, getlink=True)
        if not isinstance(child_link, h5py.HardLink):
            raise _fail(where, path, f"{key!r} is a {type(child_link).__name__}; links are refused")
        child = node[key]
        if isinstance(child, h5py.Group):
            out[key] = {}
            _read_group(h5py, node, key, out[key], lead, ctx)
        else:
            out[key] = _read_dataset(child, key, lead, ctx)


def _read_dataset(
    dataset: Any, key: str, lead: tuple[int, ...], ctx: tuple[Any, ...]
) -> torch.Tensor:
    size, path, where = ctx
    name = dataset.attrs.get("dtype")
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise _fail(where, path, f"dataset {key!r} has no valid dtype attribute")
    stored = _VIEWS.get(dtype, dtype)
    expected = torch.empty((), dtype=stored).numpy().dtype
    if dataset.external or dataset.is_virtual:
        raise _fail(where, path, f"dataset {key!r} reads data outside the file")
    if dataset.dtype != expected:
        raise _fail(where, path, f"dataset {key!r} holds {dataset.dtype}, expected {expected}")
    shape = tuple(dataset.shape)
    if shape[: len(lead)] != lead:
        raise _fail(where, path, f"dataset {key!r} has shape {list(shape)}, expected {list(lead)}+")
    if math.prod(shape) * expected.itemsize > MAX_EXPANSION * size + (1 << 20):
        raise _fail(where, path, f"dataset {key!r} would expand past {MAX_EXPANSION}x the file")
    array = np.empty(shape, dtype=expected)
    if array.size:
        dataset.read_direct(array)
    tensor = torch.from_numpy(array)
    if dtype == torch.bool and bool((tensor.view(torch.uint8) > 1).any()):
        raise _fail(where, path, f"bool dataset {key!r} holds bytes other than 0 and 1")
    return tensor.view(dtype) if stored is not dtype else tensor
