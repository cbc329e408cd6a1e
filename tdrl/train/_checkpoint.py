"""Pickle-free, atomic, hashed training checkpoints (safetensors + JSON), the last two kept."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tdrl.data.replay._safe_io import checkpoint_errors, checkpoint_files, sha256_file
from tdrl.errors import CheckpointError
from tdrl.train._checkpoint_verify import (
    FORMAT,
    META,
    TENSORS,
    VERSION,
    Verified,
    check_rng,
    module_states,
    optimizer_states,
    verify_checkpoint,
)

__all__ = [
    "CheckpointWriteError",
    "checkpoints",
    "latest_checkpoint",
    "load_checkpoint",
    "load_latest",
    "save_checkpoint",
]

_PREFIX = "ckpt-"
_TMP = ".tmp-"
STATE = "state/"  # the prefix of the caller's ``state`` tensors


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _flatten_optimizer(name: str, state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], Any]:
    tensors: dict[str, torch.Tensor] = {}
    per_param: dict[str, dict[str, Any]] = {}
    for pid, entries in state["state"].items():
        meta: dict[str, Any] = {}
        for k, v in entries.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{name}/{pid}/{k}"] = v.detach().contiguous()
                meta[k] = "tensor"
            else:
                meta[k] = v
        per_param[str(pid)] = meta
    return tensors, {"state": per_param, "param_groups": state["param_groups"]}


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    np_state: Any = np.random.get_state()
    py_state = random.getstate()
    meta = {
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }
    return {"rng/torch": torch.get_rng_state()}, meta


def _set_rng_state(checkpoint: Verified) -> None:
    torch_state, np_state, py_state = check_rng(checkpoint)
    torch.set_rng_state(torch_state)
    np.random.set_state(np_state)
    random.setstate(py_state)


class CheckpointWriteError(OSError):
    """A training checkpoint could not be written (no space, a read-only folder, a quota, an
    I/O error); the previous checkpoints are intact. ``errno`` is the failing call's.

    Examples:
        >>> str(CheckpointWriteError(28, "save_checkpoint: could not write ckpt-10"))
        'save_checkpoint: could not write ckpt-10'
    """

    def __str__(self) -> str:
        return str(self.strerror)


def save_checkpoint(
    run_dir: str | Path,
    *,
    frames: int,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    counters: dict[str, Any],
    buffer: Any = None,
    keep: int = 2,
    state: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Writes ``run_dir/checkpoints/ckpt-<frames>`` atomically and keeps the newest ``keep``.

    Contents: ``tensors.safetensors`` (module parameters and buffers, optimizer tensors, the torch
    RNG state and the caller's ``state`` tensors), ``buffer/`` (a replay buffer's ``dumps``) and
    ``meta.json`` (counters, optimizer hyperparameters, numpy/python RNG states and the SHA-256
    hash of every other file). Every file is fsynced before ``meta.json`` is written, and
    ``meta.json`` last: its presence marks a complete checkpoint. The folder is built under a
    temporary name (``.tmp-ckpt-<frames>-<pid>``), fsynced, then renamed into place.

    A write that fails at any step (no space, a read-only folder, a quota, an I/O error, an
    interrupt) removes the temporary folder and raises: the older checkpoints are untouched and
    nothing half-written is ever named ``ckpt-*``. Temporary folders of writers that died
    (``kill -9``) are removed by the next save. Old checkpoints are pruned only after the new one
    is in place.

    Raises:
        CheckpointWriteError: a write, fsync or rename failed; the message names the
            checkpoint and the failing call's error.

    Examples:
        >>> import tempfile, torch
        >>> net = torch.nn.Linear(2, 1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_checkpoint(d, frames=10, modules={"net": net}, optimizers={},
        ...                            counters={"iteration": 1})
        ...     print(path.name, load_checkpoint(path, modules={"net": net})["iteration"])
        ckpt-000000010 1
    """
    root = Path(run_dir) / "checkpoints"
    final = root / f"{_PREFIX}{frames:09d}"
    tmp = root / f"{_TMP}{final.name}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(root)
        tmp.mkdir()
        try:
            _write_contents(tmp, frames, modules, optimizers, counters, buffer, state or {})
            _move_into_place(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync(root)
    except OSError as err:
        raise CheckpointWriteError(
            err.errno,
            f"save_checkpoint: could not write the checkpoint {final} ({type(err).__name__}: "
            f"{err}; expected a writable folder with room for it). The previous checkpoints "
            f"in {root} are intact; free space or fix the folder's permissions.",
        ) from err
    for old in _complete(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_contents(
    tmp: Path,
    frames: int,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    counters: dict[str, Any],
    buffer: Any,
    state: dict[str, torch.Tensor],
) -> None:
    """Every file of a checkpoint into the empty folder ``tmp``, fsynced, ``meta.json`` last."""
    tensors: dict[str, torch.Tensor] = {}
    for name, module in modules.items():
        for k, v in module.state_dict().items():
            tensors[f"module/{name}/{k}"] = v.detach().contiguous().clone()
    optim_meta = {}
    for name, opt in optimizers.items():
        t, m = _flatten_optimizer(f"optim/{name}", opt.state_dict())
        tensors.update(t)
        optim_meta[name] = m
    for name, value in state.items():
        tensors[f"{STATE}{name}"] = value.detach().to("cpu").contiguous().clone()
    rng_t, rng_m = _rng_state()
    tensors.update(rng_t)
    _save_tensors(tensors, tmp / TENSORS)
    _fsync(tmp / TENSORS)
    if buffer is not None:
        buffer.dumps(tmp / "buffer")  # fsyncs its own files
    hashes = {
        p.as_posix(): sha256_file(tmp / p, "save_checkpoint")
        for p in checkpoint_files(tmp, "save_checkpoint")
    }
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "frames": frames,
        "counters": counters,
        "optimizers": optim_meta,
        "rng": rng_m,
        "files": hashes,
    }
    with (tmp / META).open("w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync(tmp)


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' ``save_file``; its I/O failures (a ``SafetensorError`` carrying the OS
    error's text, e.g. ``No space left on device (os error 28)``) become ``OSError``."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path))
    except SafetensorError as err:
        code = re.search(r"os error (\d+)", str(err))
        raise OSError(int(code.group(1)) if code else errno.EIO, str(err)) from err


def _move_into_place(tmp: Path, final: Path) -> None:
    """Renames ``tmp`` to ``final``; a checkpoint already there (the same frame, saved again)
    is moved aside first and put back if the rename fails."""
    if not final.exists():
        tmp.rename(final)
        return
    aside = final.with_name(f"{_TMP}old-{final.name}-{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    final.rename(aside)
    try:
        tmp.rename(final)
    except BaseException:
        aside.rename(final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _remove_abandoned(root: Path) -> None:
    """Removes the temporary folders of this process and of writers that no longer run."""
    for path in list(root.iterdir()):
        if not path.name.startswith(_TMP):
            continue
        pid = path.name.rpartition("-")[2]
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            if path.name.startswith(f"{_TMP}old-"):  # a checkpoint moved aside: keep it
                final = root / path.name[len(f"{_TMP}old-") :].rpartition("-")[0]
                if not final.exists():
                    path.rename(final)
                    continue
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _complete(root: Path) -> list[Path]:
    return [p for p in checkpoints(root.parent) if (p / META).exists()]


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Every ``ckpt-*`` entry of a run, oldest first (complete or not, verified or not)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.name.startswith(_PREFIX)), key=lambda p: p.name)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run (not verified: see :func:`load_latest`), or None."""
    found = _complete(Path(run_dir) / "checkpoints")
    return found[-1] if found else None


def load_checkpoint(
    path: str | Path,
    *,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer] | None = None,
    buffer: Any = None,
    restore_rng: bool = False,
    check: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any]:
    """Verifies a checkpoint, then loads it into the given objects; returns its counters.

    No pickle anywhere and nothing read outside ``path``. Everything is checked before anything
    changes: the folder (no links, exactly the files ``meta.json`` lists, with their hashes), the
    module and optimizer states against the objects, the RNG states, ``check(counters)`` (the
    caller's validation of its counters) and the replay buffer (its ``loads`` validates before it
    changes). Only then are modules, optimizers and RNGs updated.

    Raises:
        CheckpointError: naming the offending file if the checkpoint is incomplete, tampered
            with, corrupt or does not match the objects.
    """
    checkpoint = verify_checkpoint(path)
    states = module_states(checkpoint, modules)
    optim_states = optimizer_states(checkpoint, optimizers or {})
    if restore_rng:
        check_rng(checkpoint)
    counters = {"frames": checkpoint.meta["frames"], **checkpoint.meta["counters"]}
    state = {k[len(STATE) :]: v for k, v in checkpoint.tensors.items() if k.startswith(STATE)}
    if state:
        counters["state"] = state
    if check is not None:
        with checkpoint_errors(checkpoint.path / META, "load_checkpoint"):
            check(counters)
    if buffer is not None:
        buffer.loads(checkpoint.path / "buffer")
    for name, module in modules.items():
        module.load_state_dict(states[name])
    for name, opt in (optimizers or {}).items():
        with checkpoint_errors(checkpoint.path / META, "load_checkpoint"):
            opt.load_state_dict(optim_states[name])
    if restore_rng:
        _set_rng_state(checkpoint)
    return counters


def report_to_stderr(message: str) -> None:
    """Prints a resume/eval message on stderr (the default ``report`` of :func:`load_latest`)."""
    print(message, file=sys.stderr, flush=True)


def load_latest(
    run_dir: str | Path,
    *,
    where: str,
    report: Callable[[str], None] | None = None,
    **load_kwargs: Any,
) -> tuple[Path, dict[str, Any]]:
    """Loads the newest checkpoint of a run that verifies; returns its path and counters.

    A checkpoint that fails verification is skipped (``report`` is told which and why) and the
    next older one is tried.

    Raises:
        FileNotFoundError: if the run has no checkpoint at all.
        CheckpointError: if none verifies; the message lists each checkpoint and why.
    """
    found = checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(
            f"{where}: no checkpoint under {Path(run_dir) / 'checkpoints'} (expected ckpt-* "
            "folders written by `tdrl train`). Start a new run instead."
        )
    failures: list[str] = []
    for path in reversed(found):
        try:
            return path, load_checkpoint(path, **load_kwargs)
        except CheckpointError as err:
            failures.append(f"{path.name}: {err}")
            if report is not None:
                report(f"{where}: skipping checkpoint {path.name} ({err})")
    listed = "\n  ".join(failures)
    raise CheckpointError(
        f"{where}: no checkpoint of {run_dir} verifies (got {len(failures)} failing; expected at "
        f"least one complete, untampered checkpoint):\n  {listed}\nRestore a checkpoint from a "
        "backup or start a new run."
    )
