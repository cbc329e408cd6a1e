"""Replay buffer checkpoint plumbing: state headers, component checks, checkpoint directories."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tdrl.errors import CheckpointError

from ._checkpoint import atomic_write_dir, read_json, read_tree, resolve_checkpoint_dir, write_tree
from ._h5 import read_h5_storage
from ._safe_io import checkpoint_files

__all__ = [
    "FORMAT",
    "METADATA",
    "VERSION",
    "check_header",
    "check_length",
    "checked_generator_state",
    "read_buffer_dir",
    "write_buffer_dir",
]

FORMAT = "tdrl.replay_buffer"
VERSION = 1
METADATA = "buffer_metadata.json"
_HEADER = ("format", "version", "components", "len")
_SECTIONS = ("storage", "sampler", "writer")
_PLAIN = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,99}")


def _config_diff(prefix: str, saved: Any, current: dict[str, Any]) -> list[str]:
    if not isinstance(saved, dict):
        return [f"{prefix} (got {saved!r}; expected {current})"]
    keys = sorted(set(saved) | set(current))
    return [
        f"{prefix}.{k} (checkpoint {saved.get(k)!r}, this buffer {current.get(k)!r})"
        for k in keys
        if saved.get(k) != current.get(k)
    ]


def check_header(state: Any, components: dict[str, Any], where: str) -> None:
    """Checks the format, the version and that the saved components equal ``components``.

    Raises:
        CheckpointError: naming every differing component argument.

    Examples:
        >>> check_header({"format": FORMAT, "version": VERSION, "components": {}}, {}, "here")
    """
    got = state.get("format") if isinstance(state, dict) else type(state).__name__
    if not isinstance(state, dict) or got != FORMAT:
        raise CheckpointError(
            f"{where}: not a replay buffer state (got format {got!r}; expected {FORMAT!r}). "
            "Pass what state_dict()/dumps() produced."
        )
    if state.get("version") != VERSION:
        raise CheckpointError(
            f"{where}: unsupported version (got {state.get('version')!r}; expected {VERSION}). "
            "Load it with the tdrl version that wrote it."
        )
    saved = state.get("components")
    saved = saved if isinstance(saved, dict) else {}
    diffs: list[str] = []
    for part, current in components.items():
        diffs += _config_diff(part, saved.get(part), current)
    if diffs:
        raise CheckpointError(
            f"{where}: the checkpoint does not match this buffer (got differences "
            f"{'; '.join(diffs)}; expected identical components). Build the buffer with the same "
            "classes and arguments."
        )


def check_length(state: dict[str, Any], length: int, where: str) -> None:
    """Checks that the header's ``len`` equals the ``length`` the storage state holds.

    Raises:
        CheckpointError: if they differ (a partial or tampered checkpoint).

    Examples:
        >>> check_length({"len": 3}, 3, "here")
    """
    saved = state.get("len")
    if not isinstance(saved, int) or isinstance(saved, bool) or saved != length:
        raise CheckpointError(
            f"{where}: the buffer header and the storage disagree on the number of elements "
            f"(got len={saved!r} in the header, {length} in the storage; expected equal). The "
            "checkpoint is corrupted; dump again."
        )


def checked_generator_state(state: dict[str, Any], where: str) -> torch.Tensor | None:
    """Returns the saved generator state (``None`` if none was saved) after validating it."""
    generator = state.get("generator")
    if not isinstance(generator, dict) or "state" not in generator:
        return None
    try:
        torch.Generator().set_state(generator["state"])
    except (RuntimeError, TypeError) as err:
        raise CheckpointError(
            f"{where}: invalid generator state ({err}). The checkpoint is corrupted; dump again."
        ) from err
    return generator["state"]


def write_buffer_dir(
    path: str | os.PathLike[str],
    state: dict[str, Any],
    where: str,
    after: Callable[[Path], None] | None = None,
) -> None:
    """Writes a buffer ``state_dict`` as a checkpoint directory, atomically.

    The header goes to ``buffer_metadata.json``; every other section becomes a folder.
    ``after(tmp)`` adds files to the folder before it is swapped into place.
    """
    header = {k: state[k] for k in _HEADER}
    body = {k: v for k, v in state.items() if k not in _HEADER}

    def write(tmp: Path) -> None:
        write_tree(tmp, body, {METADATA: header})
        if after is not None:
            after(tmp)

    atomic_write_dir(path, write, where)


def read_buffer_dir(
    path: str | os.PathLike[str], where: str, max_size: int | None = None
) -> dict[str, Any]:
    """Reads a checkpoint directory back into a buffer ``state_dict`` (JSON, raw files and,
    for an :class:`~tdrl.data.H5StorageCheckpointer` checkpoint, its HDF5 file; never pickle).

    ``max_size`` (the loading storage's) bounds what an HDF5 storage file may hold."""
    directory = resolve_checkpoint_dir(path, where)
    checkpoint_files(directory, where)  # no link or special file anywhere, before any read
    header = read_json(Path(directory) / METADATA, where)
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{where}: invalid {METADATA} (got {type(header).__name__}; expected an object). The "
            "checkpoint is corrupted; dump again."
        )
    tree = read_tree(directory, where, walked=True)
    missing = [k for k in _SECTIONS if not isinstance(tree.get(k), dict)]
    if missing:
        raise CheckpointError(
            f"{where}: the checkpoint lacks {missing} (got {sorted(tree)}; expected storage, "
            "sampler and writer). The checkpoint is partial; dump again."
        )
    storage = tree["storage"]
    if "checkpointer" in storage:
        tree["storage"] = _read_h5_section(Path(directory) / "storage", storage, where, max_size)
    return {**tree, **header}


def _read_h5_section(
    folder: Path, marker: dict[str, Any], where: str, max_size: int | None
) -> dict[str, Any]:
    name = marker.get("file")
    if (
        marker.get("checkpointer") != "h5"
        or set(marker) != {"checkpointer", "file"}
        or not isinstance(name, str)
        or not _PLAIN.fullmatch(name)
    ):
        raise CheckpointError(
            f"{where}: {folder / 'meta.json'} names an invalid storage file (got {marker!r}; "
            "expected {'checkpointer': 'h5', 'file': <plain file name>}). The checkpoint is "
            "corrupted; dump again."
        )
    limit = max_size if max_size is not None else 2**62
    return read_h5_storage(folder / name, where, limit)
