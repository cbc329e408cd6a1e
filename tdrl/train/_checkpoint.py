"""Pickle-free, atomic, hashed training checkpoints (safetensors + JSON), the last two kept."""

from __future__ import annotations

import json
import os
import random
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

__all__ = ["checkpoints", "latest_checkpoint", "load_checkpoint", "load_latest", "save_checkpoint"]

_PREFIX = "ckpt-"


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


def save_checkpoint(
    run_dir: str | Path,
    *,
    frames: int,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    counters: dict[str, Any],
    buffer: Any = None,
    keep: int = 2,
) -> Path:
    """Writes ``run_dir/checkpoints/ckpt-<frames>`` atomically and keeps the newest ``keep``.

    Contents: ``tensors.safetensors`` (module parameters and buffers, optimizer tensors, the torch
    RNG state), ``buffer/`` (a replay buffer's ``dumps``) and ``meta.json`` (counters, optimizer
    hyperparameters, numpy/python RNG states and the SHA-256 hash of every other file). Every
    file is fsynced before ``meta.json`` is written, and ``meta.json`` last: its presence marks a
    complete checkpoint. The directory is built under a temporary name, fsynced, then renamed.

    Examples:
        >>> import tempfile, torch
        >>> net = torch.nn.Linear(2, 1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_checkpoint(d, frames=10, modules={"net": net}, optimizers={},
        ...                            counters={"iteration": 1})
        ...     print(path.name, load_checkpoint(path, modules={"net": net})["iteration"])
        ckpt-000000010 1
    """
    from safetensors.torch import save_file

    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{frames:09d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    tensors: dict[str, torch.Tensor] = {}
    for name, module in modules.items():
        for k, v in module.state_dict().items():
            tensors[f"module/{name}/{k}"] = v.detach().contiguous().clone()
    optim_meta = {}
    for name, opt in optimizers.items():
        t, m = _flatten_optimizer(f"optim/{name}", opt.state_dict())
        tensors.update(t)
        optim_meta[name] = m
    rng_t, rng_m = _rng_state()
    tensors.update(rng_t)
    save_file(tensors, str(tmp / TENSORS))
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
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _fsync(root)
    for old in _complete(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


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
