"""Verification of training checkpoints before anything is loaded from them.

A training checkpoint folder holds ``tensors.safetensors``, an optional ``buffer/`` (a replay
buffer's ``dumps``) and ``meta.json``, written last, which records a SHA-256 hash of every other
file. :func:`verify_checkpoint` walks the folder without following links, refuses links and
special files, checks that the folder holds exactly the files ``meta.json`` lists with the hashes
it records, parses the safetensors file from the bytes it hashed and checks the shape of
``meta.json``. Module, optimizer and RNG states are then checked against the objects they will
load into (:func:`module_states`, :func:`optimizer_states`, :func:`check_rng`) before any of them
changes. Every problem is a :class:`~tdrl.errors.CheckpointError` naming the file.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tdrl.data.replay._safe_io import (
    checkpoint_errors,
    checkpoint_files,
    read_bytes,
    read_json,
    sha256_file,
)
from tdrl.errors import CheckpointError

__all__ = [
    "FORMAT",
    "META",
    "TENSORS",
    "VERSION",
    "Verified",
    "check_rng",
    "module_states",
    "optimizer_states",
    "verify_checkpoint",
]

FORMAT = "tdrl.train_checkpoint"
VERSION = 1
META = "meta.json"
TENSORS = "tensors.safetensors"
_WHERE = "load_checkpoint"
_MAX_TENSOR_BYTES = 1 << 36  # 64 GiB: a larger tensors file is not a training checkpoint


@dataclass(frozen=True)
class Verified:
    """A checkpoint whose files matched their hashes: its parsed ``meta.json`` and tensors."""

    path: Path
    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]


def _fail(path: Path, what: str, fix: str = "Resume from another checkpoint") -> CheckpointError:
    return CheckpointError(f"{_WHERE}: {path}: {what}. {fix}.")


def _check_meta(meta: Any, path: Path) -> dict[str, Any]:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise _fail(
            path, f"not a tdrl training checkpoint (got format {got!r}; expected {FORMAT!r})"
        )
    if meta.get("version") != VERSION:
        raise _fail(path, f"unsupported version (got {meta.get('version')!r}; expected {VERSION})")
    expected = {
        "frames": "an int >= 0",
        "counters": "an object",
        "optimizers": "an object",
        "rng": "an object",
        "files": "an object",
    }
    for key, rule in expected.items():
        value = meta.get(key)
        if key == "frames":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, dict)
        if not ok:
            raise _fail(path, f"invalid entry {key!r} (got {value!r:.80}; expected {rule})")
    return meta


def _hash_matches(folder: Path, listed: dict[str, Any], tensors_bytes: bytes) -> None:
    for name, digest in sorted(listed.items()):
        path = folder / name
        actual = (
            hashlib.sha256(tensors_bytes).hexdigest()
            if name == TENSORS
            else sha256_file(path, _WHERE)
        )
        if not isinstance(digest, str) or digest != actual:
            raise _fail(
                path,
                f"content hash mismatch (got sha256 {actual[:16]}...; expected {str(digest)[:16]}... "
                f"as recorded in {folder / META}); the file was modified or is corrupt",
            )


def verify_checkpoint(folder: str | Path) -> Verified:
    """Verifies a training checkpoint folder: no links, exactly the listed files, their hashes.

    Raises:
        CheckpointError: naming the offending file.

    Examples:
        >>> import tempfile
        >>> from tdrl.train import save_checkpoint
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_checkpoint(d, frames=5, modules={"net": torch.nn.Linear(2, 1)},
        ...                            optimizers={}, counters={})
        ...     sorted(verify_checkpoint(path).tensors)[:2]
        ['module/net/bias', 'module/net/weight']
    """
    folder = Path(folder)
    with checkpoint_errors(folder, _WHERE):
        files = {p.as_posix() for p in checkpoint_files(folder, _WHERE)}
        if META not in files:
            raise _fail(
                folder, f"incomplete checkpoint (got files {sorted(files)[:8]}; expected {META})"
            )
        meta = _check_meta(read_json(folder / META, _WHERE), folder / META)
        listed = meta["files"]
        unlisted = sorted(files - set(listed) - {META})
        if unlisted:
            raise _fail(
                folder / unlisted[0],
                f"file not recorded in {META} (got {len(unlisted)} unlisted file(s): "
                f"{unlisted[:5]}; expected only the files it lists)",
            )
        absent = sorted(set(listed) - files)
        if TENSORS not in listed or absent:
            raise _fail(
                folder / (absent[0] if absent else TENSORS),
                f"missing file (got files {sorted(files)[:8]}; expected {sorted(set(listed))[:8]})",
            )
        raw = read_bytes(folder / TENSORS, _WHERE, _MAX_TENSOR_BYTES)
        _hash_matches(folder, listed, raw)
        from safetensors import SafetensorError
        from safetensors.torch import load

        try:
            tensors = load(raw)
        except (SafetensorError, ValueError, RuntimeError) as err:
            raise _fail(folder / TENSORS, f"not a valid safetensors file ({err})") from err
        return Verified(folder, meta, tensors)


def module_states(
    checkpoint: Verified, modules: dict[str, nn.Module]
) -> dict[str, dict[str, torch.Tensor]]:
    """The state dict of each module, checked against its current keys, shapes and dtypes."""
    path = checkpoint.path / TENSORS
    out: dict[str, dict[str, torch.Tensor]] = {}
    for name, module in modules.items():
        prefix = f"module/{name}/"
        state = {k[len(prefix) :]: v for k, v in checkpoint.tensors.items() if k.startswith(prefix)}
        current = module.state_dict()
        if set(state) != set(current):
            missing, extra = sorted(set(current) - set(state)), sorted(set(state) - set(current))
            raise _fail(
                path,
                f"module {name!r} does not match (got missing {missing[:5]}, unexpected "
                f"{extra[:5]}; expected the keys of the module)",
                "Build the run with the config it was saved with",
            )
        for key, value in state.items():
            want = current[key]
            if value.shape != want.shape or value.dtype != want.dtype:
                raise _fail(
                    path,
                    f"module {name!r} entry {key!r} does not match (got {value.dtype} "
                    f"{list(value.shape)}; expected {want.dtype} {list(want.shape)})",
                    "Build the run with the config it was saved with",
                )
        out[name] = state
    return out


def _check_group(name: str, saved: Any, group: dict[str, Any], path: Path) -> None:
    if not isinstance(saved, dict) or set(saved) != set(group):
        got = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
        raise _fail(
            path,
            f"optimizer {name!r} param group keys differ (got {got}; expected {sorted(group)})",
        )
    params = saved["params"]
    if not isinstance(params, list) or len(params) != len(group["params"]):
        raise _fail(path, f"optimizer {name!r} has a different parameter list (got {params!r:.80})")
    for key, value in group.items():
        if key == "params":
            continue
        kind = (list, tuple) if isinstance(value, (list, tuple)) else type(value)
        if value is not None and not isinstance(saved[key], kind):
            raise _fail(
                path,
                f"optimizer {name!r} hyperparameter {key!r} has the wrong type (got "
                f"{saved[key]!r:.40}; expected {type(value).__name__})",
            )


def _optimizer_state(
    name: str, meta: Any, checkpoint: Verified, opt: torch.optim.Optimizer
) -> dict[str, Any]:
    path = checkpoint.path / META
    current = opt.state_dict()
    groups = meta.get("param_groups") if isinstance(meta, dict) else None
    per_param = meta.get("state") if isinstance(meta, dict) else None
    if (
        not isinstance(groups, list)
        or not isinstance(per_param, dict)
        or len(groups) != len(current["param_groups"])
    ):
        raise _fail(
            path, f"optimizer {name!r} state is malformed or has a different number of param groups"
        )
    for saved, group in zip(groups, current["param_groups"]):
        _check_group(name, saved, group, path)
    shapes = {
        pid: p.shape
        for g, group in zip(opt.param_groups, current["param_groups"])
        for pid, p in zip(group["params"], g["params"])
    }
    state: dict[int, dict[str, Any]] = {}
    for pid, entries in per_param.items():
        if not pid.isdigit() or int(pid) not in shapes or not isinstance(entries, dict):
            raise _fail(path, f"optimizer {name!r} holds state for an unknown parameter {pid!r}")
        state[int(pid)] = {}
        for key, value in entries.items():
            if value != "tensor":
                state[int(pid)][key] = value
                continue
            tensor = checkpoint.tensors.get(f"optim/{name}/{pid}/{key}")
            if tensor is None or (tensor.dim() and tensor.shape != shapes[int(pid)]):
                got = "nothing" if tensor is None else list(tensor.shape)
                raise _fail(
                    checkpoint.path / TENSORS,
                    f"optimizer {name!r} state {pid}/{key} is missing or misshapen (got {got}; "
                    f"expected a scalar or {list(shapes[int(pid)])})",
                )
            state[int(pid)][key] = tensor
    return {"state": state, "param_groups": groups}


def optimizer_states(
    checkpoint: Verified, optimizers: dict[str, torch.optim.Optimizer]
) -> dict[str, dict[str, Any]]:
    """The state dict of each optimizer, checked against its current param groups."""
    saved = checkpoint.meta["optimizers"]
    missing = sorted(set(optimizers) - set(saved))
    if missing:
        raise _fail(
            checkpoint.path / META, f"no state for optimizer(s) {missing} (got {sorted(saved)})"
        )
    return {
        name: _optimizer_state(name, saved[name], checkpoint, opt)
        for name, opt in optimizers.items()
    }


def check_rng(checkpoint: Verified) -> tuple[torch.Tensor, tuple[Any, ...], tuple[Any, ...]]:
    """The torch, numpy and python RNG states, each validated on a scratch generator."""
    path = checkpoint.path / META
    torch_state = checkpoint.tensors.get("rng/torch")
    rng = checkpoint.meta["rng"]
    if torch_state is None or torch_state.dtype != torch.uint8:
        got = "nothing" if torch_state is None else torch_state.dtype
        raise _fail(
            checkpoint.path / TENSORS, f"invalid torch RNG state (got {got}; expected uint8)"
        )
    try:
        torch.Generator().set_state(torch_state)
        npm, pym = rng["numpy"], rng["python"]
        np_state = (npm[0], np.array(npm[1], dtype=np.uint32), *npm[2:])
        np.random.RandomState().set_state(np_state)
        py_state = (pym[0], tuple(pym[1]), pym[2])
        random.Random().setstate(py_state)
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError, OverflowError) as err:
        raise _fail(path, f"invalid RNG state ({type(err).__name__}: {err})") from err
    return torch_state, np_state, py_state
