"""Pickle-free, atomic checkpoint directories.

A state tree (nested ``dict`` whose leaves are tensors or JSON values) is written as one folder per
dict: each folder holds a ``meta.json`` that lists its entries and one raw ``<name>.memmap`` file
per tensor (C-order bytes, readable with ``numpy.memmap``/``torch.from_file`` given the dtype and
shape from ``meta.json``). Reading parses JSON and maps raw bytes: nothing is unpickled, no code
runs.

A dump first writes a temporary sibling directory, fsyncs it, then swaps it into place (an atomic
``renameat2(RENAME_EXCHANGE)`` on Linux, two renames elsewhere), so that a process killed at any
point leaves either the previous complete checkpoint or the new one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from tdrl.errors import CheckpointError

from ._safe_io import checkpoint_files, map_tensor, refuse_link
from ._safe_io import read_json as safe_read_json

__all__ = ["atomic_write_dir", "read_json", "read_tree", "resolve_checkpoint_dir", "write_tree"]

META = "meta.json"
FORMAT = "tdrl.checkpoint"
VERSION = 1

_DTYPES: dict[str, torch.dtype] = {
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
_SAFE_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,99}")


def _file_name(key: str, used: set[str]) -> str:
    name = key if _SAFE_NAME.fullmatch(key) and key != META else "_key"
    base, i = name, 0
    while name in used:
        i += 1
        name = f"{base}_{i}"
    used.add(name)
    return name


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_tensor(path: Path, tensor: torch.Tensor) -> dict[str, Any]:
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise TypeError(f"cannot checkpoint a tensor of dtype {tensor.dtype}")
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    with open(path, "wb") as f:
        if flat.numel():
            f.write(flat.view(torch.uint8).numpy().data)
        f.flush()
        os.fsync(f.fileno())
    return {"type": "tensor", "file": path.name, "dtype": dtype, "shape": list(tensor.shape)}


def _check_json(value: Any, where: str) -> Any:
    # Non-finite floats are written as JSON ``Infinity``/``NaN``, which ``json.loads`` reads back.
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_check_json(v, where) for v in value]
    raise TypeError(f"cannot checkpoint {type(value).__name__} at {where} (expected JSON values)")


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def write_tree(
    directory: Path, tree: Mapping[str, Any], extra_json: Mapping[str, Any] | None = None
) -> None:
    """Writes a state tree into ``directory`` (created), fsyncing every file.

    Args:
        directory: the folder to create.
        tree: a mapping from string keys to tensors, JSON values or nested mappings (folders).
        extra_json: ``{file name: JSON object}`` written next to ``meta.json`` (before it).

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "ckpt"
        >>> write_tree(d, {"x": torch.arange(3), "sub": {"alpha": 0.5}})
        >>> sorted(p.name for p in d.iterdir())
        ['meta.json', 'sub', 'x.memmap']
    """
    directory.mkdir(parents=True)
    entries: dict[str, Any] = {}
    used: set[str] = set()
    for key, value in tree.items():
        if not isinstance(key, str):
            raise TypeError(f"checkpoint keys must be strings (got {key!r})")
        if isinstance(value, torch.Tensor):
            entries[key] = _write_tensor(directory / f"{_file_name(key, used)}.memmap", value)
        elif isinstance(value, Mapping):
            name = _file_name(key, used)
            write_tree(directory / name, value)
            entries[key] = {"type": "dict", "dir": name}
        else:
            entries[key] = {"type": "value", "value": _check_json(value, f"{directory}/{key}")}
    for name, obj in (extra_json or {}).items():
        _write_json(directory / name, obj)
    # meta.json is written last: a folder without it is incomplete.
    _write_json(directory / META, {"format": FORMAT, "version": VERSION, "entries": entries})
    _fsync_path(directory)


def _fail(where: str, what: str, fix: str = "Dump the buffer again") -> CheckpointError:
    return CheckpointError(f"{where}: {what}. {fix}.")


def _plain_name(name: Any, directory: Path, where: str) -> Path:
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
    ):
        raise _fail(where, f"invalid file name {name!r} in {directory / META}")
    return directory / name


def _read_tensor(directory: Path, entry: dict[str, Any], where: str) -> torch.Tensor:
    path = _plain_name(entry.get("file"), directory, where)
    dtype_name, shape = entry.get("dtype"), entry.get("shape")
    dtype = _DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if (
        dtype is None
        or not isinstance(shape, list)
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
    ):
        raise _fail(where, f"invalid tensor metadata {entry!r} in {directory / META}")
    return map_tensor(path, dtype, shape, where)


def read_json(path: Path, where: str) -> Any:
    """Parses the JSON file ``path``; raises ``CheckpointError`` naming it if it is missing, a
    link, too large, nested too deep or invalid."""
    return safe_read_json(path, where)


def read_tree(directory: Path, where: str, *, walked: bool = False) -> dict[str, Any]:
    """Reads a state tree written by :func:`write_tree` (JSON and raw bytes only, no pickle).

    The folder is first walked without following links: a symbolic link or a special file
    anywhere in it is refused before anything is read.

    Args:
        directory: the folder to read.
        where: ``"<Class>.<method>"`` used to prefix error messages.
        walked: the caller already checked the folder with
            :func:`~tdrl.data.replay._safe_io.checkpoint_files`.

    Raises:
        CheckpointError: if a file is missing, truncated, a link, or its metadata is invalid.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "ckpt"
        >>> write_tree(d, {"x": torch.arange(3), "sub": {"alpha": 0.5}})
        >>> read_tree(d, "example")
        {'x': tensor([0, 1, 2]), 'sub': {'alpha': 0.5}}
    """
    if not walked:
        checkpoint_files(directory, where)
    return _read_tree(directory, where)


def _read_tree(directory: Path, where: str) -> dict[str, Any]:
    meta_path = directory / META
    meta = read_json(meta_path, where)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _fail(where, f"{meta_path} is not a tdrl checkpoint file", "Check the path")
    if meta.get("version") != VERSION or not isinstance(meta.get("entries"), dict):
        raise _fail(where, f"unsupported checkpoint version {meta.get('version')!r} in {meta_path}")
    out: dict[str, Any] = {}
    for key, entry in meta["entries"].items():
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind == "tensor":
            out[key] = _read_tensor(directory, entry, where)
        elif kind == "dict":
            sub = _plain_name(entry.get("dir"), directory, where)
            if not sub.is_dir():
                raise _fail(where, f"missing folder {sub} listed in {meta_path}")
            out[key] = _read_tree(sub, where)
        elif kind == "value":
            out[key] = entry.get("value")
        else:
            raise _fail(where, f"invalid entry {key!r} in {meta_path}")
    return out


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swaps two paths (Linux ``renameat2``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def _siblings(path: Path, tag: str) -> list[Path]:
    prefix = f".{path.name}.{tag}-"
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(prefix))


def _pid_alive(name: str) -> bool:
    try:
        pid = int(name.rsplit("-", 2)[-2])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return pid != os.getpid()


def _is_checkpoint(path: Path) -> bool:
    try:
        meta = safe_read_json(path / META, "checkpoint probe")
    except (OSError, CheckpointError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def _swap_into_place(tmp: Path, path: Path) -> None:
    if not path.exists():
        os.rename(tmp, path)
    elif _exchange(tmp, path):
        shutil.rmtree(tmp)  # now holds the previous checkpoint
    else:
        old = path.parent / f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(path, old)
        # If killed here, ``resolve_checkpoint_dir`` finds the previous checkpoint in ``old``.
        os.rename(tmp, path)
        shutil.rmtree(old)
    _fsync_path(path.parent)


def atomic_write_dir(
    path: str | os.PathLike[str], write: Callable[[Path], None], where: str
) -> None:
    """Calls ``write(tmp)`` on a fresh temporary sibling of ``path``, then swaps it into place.

    Args:
        path: the checkpoint directory. It may not exist, be empty, or hold a previous
            checkpoint (replaced); any other non-empty directory is refused.
        write: writes the complete checkpoint into the (not yet existing) folder it is given.
        where: ``"<Class>.<method>"`` used to prefix error messages.

    Raises:
        CheckpointError: if ``path`` is a file, a symbolic link, or a non-empty directory that
            is not a checkpoint.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "ckpt"
        >>> atomic_write_dir(d, lambda tmp: write_tree(tmp, {"v": 1}), "example")
        >>> atomic_write_dir(d, lambda tmp: write_tree(tmp, {"v": 2}), "example")
        >>> read_tree(d, "example")
        {'v': 2}
    """
    path = Path(os.path.abspath(path))
    refuse_link(path, where)  # loads refuses links: never write a checkpoint it cannot read
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not _is_checkpoint(path))):
        raise CheckpointError(
            f"{where}: refusing to replace {path} (got a file or a non-empty directory that is not "
            "a tdrl checkpoint; expected a new, empty or checkpoint directory). Choose another path."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        _swap_into_place(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # Leftovers of killed dumps: previous checkpoints set aside by a swap, and temporary folders
    # whose writer process is gone.
    stale = _siblings(path, "old") + [p for p in _siblings(path, "tmp") if not _pid_alive(p.name)]
    for leftover in stale:
        shutil.rmtree(leftover, ignore_errors=True)


def resolve_checkpoint_dir(path: str | os.PathLike[str], where: str) -> Path:
    """Returns the complete checkpoint at ``path``, or the previous one a killed swap left aside.

    Raises:
        CheckpointError: if there is no checkpoint at ``path`` or ``path`` is a symbolic link.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "ckpt"
        >>> atomic_write_dir(d, lambda tmp: write_tree(tmp, {"v": 1}), "example")
        >>> resolve_checkpoint_dir(d, "example") == d
        True
    """
    path = Path(os.path.abspath(path))
    refuse_link(path, where)
    if path.is_dir() and (path / META).exists():
        return path
    if not path.exists() and path.parent.is_dir():
        with contextlib.suppress(OSError):
            previous = [p for p in _siblings(path, "old") if _is_checkpoint(p)]
            if previous:
                return previous[-1]
    got = f"a directory without {META}" if path.exists() else "no such path"
    raise CheckpointError(
        f"{where}: no checkpoint at {path} (got {got}; expected a directory written by dumps). "
        "Check the path or dump the buffer first."
    )
