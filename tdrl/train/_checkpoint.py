"""Pickle-free, atomic training checkpoints (safetensors + JSON), the last two kept."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tdrl.errors import CheckpointError

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_PREFIX = "ckpt-"


def _fsync_dir(path: Path) -> None:
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


def _unflatten_optimizer(name: str, meta: Any, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for pid, entries in meta["state"].items():
        state[int(pid)] = {
            k: (tensors[f"{name}/{pid}/{k}"] if v == "tensor" else v) for k, v in entries.items()
        }
    return {"state": state, "param_groups": meta["param_groups"]}


def _rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    np_state: Any = np.random.get_state()
    py_state = random.getstate()
    meta = {
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }
    return {"rng/torch": torch.get_rng_state()}, meta


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["rng/torch"])
    npm = meta["numpy"]
    np.random.set_state((npm[0], np.array(npm[1], dtype=np.uint32), *npm[2:]))
    pym = meta["python"]
    random.setstate((pym[0], tuple(pym[1]), pym[2]))


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
    RNG state), ``meta.json`` (counters, optimizer hyperparameters, numpy/python RNG states;
    written last, so its presence marks a complete checkpoint) and ``buffer/`` (a replay buffer's
    ``dumps``). The directory is built under a temporary name, fsynced, then renamed.

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
    save_file(tensors, str(tmp / "tensors.safetensors"))
    if buffer is not None:
        buffer.dumps(tmp / "buffer")
    meta = {"frames": frames, "counters": counters, "optimizers": optim_meta, "rng": rng_m}
    with (tmp / "meta.json").open("w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    _fsync_dir(root)
    for old in _complete(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _complete(root: Path) -> list[Path]:
    if not root.exists():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(_PREFIX) and (p / "meta.json").exists()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = _complete(Path(run_dir) / "checkpoints")
    return found[-1] if found else None


def load_checkpoint(
    path: str | Path,
    *,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer] | None = None,
    buffer: Any = None,
    restore_rng: bool = False,
) -> dict[str, Any]:
    """Loads a checkpoint into the given objects (no pickle anywhere); returns its counters.

    Raises:
        CheckpointError: the directory is incomplete or does not match the objects.
    """
    from safetensors.torch import load_file

    path = Path(path)
    meta_path, tensor_path = path / "meta.json", path / "tensors.safetensors"
    if not meta_path.exists() or not tensor_path.exists():
        raise CheckpointError(
            f"load_checkpoint: {path} is not a complete checkpoint (got "
            f"{sorted(p.name for p in path.iterdir()) if path.exists() else 'no directory'}; "
            "expected meta.json and tensors.safetensors). Resume from another checkpoint."
        )
    meta = json.loads(meta_path.read_text())
    tensors = load_file(str(tensor_path))
    for name, module in modules.items():
        prefix = f"module/{name}/"
        state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        try:
            module.load_state_dict(state)
        except RuntimeError as err:
            raise CheckpointError(
                f"load_checkpoint: module {name!r} does not match the checkpoint ({err}). Build "
                "the run with the config it was saved with."
            ) from err
    for name, opt in (optimizers or {}).items():
        opt.load_state_dict(
            _unflatten_optimizer(f"optim/{name}", meta["optimizers"][name], tensors)
        )
    if buffer is not None:
        buffer.loads(path / "buffer")
    if restore_rng:
        _set_rng_state(tensors, meta["rng"])
    return {"frames": meta["frames"], **meta["counters"]}
