"""Reading checkpoint files without leaving the checkpoint folder and without running code.

Checkpoints come from disk and may be hostile: every reader here refuses symbolic links (at any
level inside the folder), special files (FIFOs, devices, sockets), oversized JSON and deeply nested
JSON, and reports every problem as a :class:`~tdrl.errors.CheckpointError` that names the file.
Files are opened with ``O_NOFOLLOW`` after the folder was walked without following links, so a
link planted anywhere in the folder is refused before anything is read through it.

The training checkpoints of :mod:`tdrl.train` use the same readers (and :func:`sha256_file`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import mmap
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tdrl.errors import CheckpointError

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "checkpoint_errors",
    "checkpoint_files",
    "map_tensor",
    "read_bytes",
    "read_json",
    "read_json_bytes",
    "refuse_link",
    "sha256_file",
]

MAX_JSON_BYTES = 64 << 20
MAX_JSON_DEPTH = 64
_MAX_ENTRIES = 1_000_000
_MAX_TREE_DEPTH = 64
_CHUNK = 1 << 20


def _fail(where: str, what: str, fix: str) -> CheckpointError:
    return CheckpointError(f"{where}: {what}. {fix}.")


@contextlib.contextmanager
def checkpoint_errors(path: str | os.PathLike[str], where: str) -> Iterator[None]:
    """Turns any unexpected error raised while reading checkpoint ``path`` into a
    ``CheckpointError`` naming it (the original error is the cause).

    Hostile files can reach code paths no check anticipated; the caller then still gets the one
    error type that means "this checkpoint is unusable".

    Examples:
        >>> try:
        ...     with checkpoint_errors("ckpt", "example"):
        ...         {}["storage"]
        ... except CheckpointError as err:
        ...     print(err)
        example: ckpt is malformed (got KeyError: 'storage'). The checkpoint is corrupted; dump it again.
    """
    try:
        yield
    except CheckpointError as err:
        if os.fspath(path) in str(err):
            raise
        what = str(err).removeprefix(f"{where}: ")
        raise CheckpointError(f"{where}: {os.fspath(path)}: {what}") from err
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        RuntimeError,
        OverflowError,
        RecursionError,
        MemoryError,
        OSError,
    ) as err:
        raise CheckpointError(
            f"{where}: {os.fspath(path)} is malformed (got {type(err).__name__}: {err}). The "
            "checkpoint is corrupted; dump it again."
        ) from err


def refuse_link(path: Path, where: str) -> None:
    """Raises ``CheckpointError`` if ``path`` itself is a symbolic link.

    Examples:
        >>> import tempfile
        >>> refuse_link(Path(tempfile.mkdtemp()), "example")
    """
    if os.path.islink(path):
        raise _fail(
            where,
            f"{path} is a symbolic link (got a link to {os.readlink(path)!r}; expected a real "
            "file or folder)",
            "Checkpoints never follow links; copy the checkpoint instead of linking it",
        )


def checkpoint_files(root: Path, where: str) -> list[Path]:
    """Walks ``root`` without following links; returns its regular files, relative, sorted.

    Raises:
        CheckpointError: if ``root`` or anything below it is a symbolic link or a special file,
            or if the folder is nested deeper than 64 levels or holds over a million entries.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "sub").mkdir()
        >>> _ = (root / "sub" / "a.json").write_text("{}")
        >>> checkpoint_files(root, "example")
        [PosixPath('sub/a.json')]
    """
    refuse_link(root, where)
    if not root.is_dir():
        raise _fail(
            where,
            f"{root} is not a folder (got {'a file' if root.exists() else 'no such path'}; "
            "expected a checkpoint folder)",
            "Check the path",
        )
    files: list[Path] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while stack:
        folder, depth = stack.pop()
        if depth > _MAX_TREE_DEPTH:
            raise _fail(
                where,
                f"{folder} is nested too deep (got over {_MAX_TREE_DEPTH} levels)",
                "The checkpoint is corrupted or hostile; dump again",
            )
        with os.scandir(folder) as entries:
            for entry in entries:
                seen += 1
                if seen > _MAX_ENTRIES:
                    raise _fail(
                        where,
                        f"{root} holds too many entries (got over {_MAX_ENTRIES})",
                        "The checkpoint is corrupted or hostile; dump again",
                    )
                path = Path(entry.path)
                if entry.is_symlink():
                    refuse_link(path, where)
                if entry.is_dir(follow_symlinks=False):
                    stack.append((path, depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    files.append(path.relative_to(root))
                else:
                    raise _fail(
                        where,
                        f"{path} is not a regular file (got a FIFO, socket or device)",
                        "The checkpoint is corrupted or hostile; dump again",
                    )
    return sorted(files)


def _open(path: Path, where: str, kind: str = "file") -> int:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _fail(
            where, f"missing {kind} {path}", "The checkpoint is partial; dump again"
        ) from None
    except OSError as err:
        if os.path.islink(path):
            refuse_link(path, where)
        raise _fail(where, f"cannot open {path} ({err})", "Check the checkpoint") from err
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _fail(
            where,
            f"{path} is not a regular file",
            "The checkpoint is corrupted or hostile; dump again",
        )
    return fd


def read_bytes(path: Path, where: str, limit: int | None = None) -> bytes:
    """The content of the regular file ``path`` (never through a link), at most ``limit`` bytes.

    Examples:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "x.bin"
        >>> _ = p.write_bytes(b"abc")
        >>> read_bytes(p, "example")
        b'abc'
    """
    fd = _open(path, where)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise _fail(
                where,
                f"{path} is too large (got {size} bytes; expected at most {limit})",
                "The checkpoint is corrupted or hostile; dump again",
            )
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def read_json(path: Path, where: str) -> Any:
    """Parses the JSON file ``path``: at most 64 MiB, nested at most 64 levels, never a link.

    Raises:
        CheckpointError: naming the file if it is missing, a link, too large, not UTF-8, not
            JSON or nested too deep.

    Examples:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "meta.json"
        >>> _ = p.write_text('{"a": [1, 2]}')
        >>> read_json(p, "example")
        {'a': [1, 2]}
    """
    return read_json_bytes(read_bytes(path, where, MAX_JSON_BYTES), path, where)


def read_json_bytes(raw: bytes, path: Path, where: str) -> Any:
    """Parses JSON ``raw`` read from ``path`` with the checks of :func:`read_json`.

    Examples:
        >>> read_json_bytes(b'[1]', Path("x.json"), "example")
        [1]
    """
    try:
        value = json.loads(raw.decode("utf-8"))
    except RecursionError:
        value, depth = None, MAX_JSON_DEPTH + 1
    except (UnicodeDecodeError, ValueError) as err:
        raise _fail(
            where, f"unreadable {path} ({err})", "The checkpoint is corrupted; dump again"
        ) from err
    else:
        depth = _depth(value)
    if depth > MAX_JSON_DEPTH:
        raise _fail(
            where,
            f"{path} is nested too deep (got over {MAX_JSON_DEPTH} levels)",
            "The checkpoint is corrupted or hostile; dump again",
        )
    return value


def map_tensor(path: Path, dtype: torch.dtype, shape: list[int], where: str) -> torch.Tensor:
    """Maps a raw C-order tensor file privately (copy-on-write: the file is never modified).

    Raises:
        CheckpointError: naming the file if its size does not match ``dtype`` and ``shape``, or
            if a bool tensor holds bytes other than 0 and 1.

    Examples:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "x.memmap"
        >>> _ = p.write_bytes(torch.arange(3).numpy().tobytes())
        >>> map_tensor(p, torch.int64, [3], "example")
        tensor([0, 1, 2])
    """
    numel = math.prod(shape)
    expected = numel * torch.empty((), dtype=dtype).element_size()
    fd = _open(path, where, "tensor file")
    try:
        size = os.fstat(fd).st_size
        if size != expected:
            raise _fail(
                where,
                f"tensor file {path} has the wrong size (got {size} bytes; expected {expected} "
                f"for dtype {str(dtype).removeprefix('torch.')} and shape {shape})",
                "The checkpoint is truncated or corrupted; dump again",
            )
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE)
    finally:
        os.close(fd)
    tensor = torch.frombuffer(mapped, dtype=dtype, count=numel).view(shape)
    if dtype == torch.bool and bool((tensor.view(torch.uint8) > 1).any()):
        raise _fail(
            where,
            f"bool tensor file {path} holds bytes other than 0 and 1",
            "The checkpoint is corrupted; dump again",
        )
    return tensor


def sha256_file(path: Path, where: str) -> str:
    """The SHA-256 hex digest of the regular file ``path`` (never through a link).

    Examples:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "x.bin"
        >>> _ = p.write_bytes(b"")
        >>> sha256_file(p, "example")[:12]
        'e3b0c44298fc'
    """
    fd = _open(path, where)
    digest = hashlib.sha256()
    try:
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()
