"""Reads a D4RL HDF5 file with ``h5py`` and lays it out as TorchRL's ``D4RLExperienceReplay`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from tdrl.errors import CheckpointError

__all__ = ["d4rl_to_tensordict", "read_d4rl_file"]

_WHERE = "D4RLExperienceReplay.__init__"
REQUIRED = ("observations", "actions", "rewards", "terminals")


def _group(group: Any, path: Path, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, item in group.items():
        if hasattr(item, "items"):  # an h5py Group
            out[name] = _group(item, path, f"{prefix}{name}/")
            continue
        value = item[()]
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = torch.from_numpy(np.ascontiguousarray(value))
        elif isinstance(value, bytes):
            out[name] = value.decode("utf-8", "replace")
        elif isinstance(value, np.generic | int | float | str):
            out[name] = value.item() if isinstance(value, np.generic) else value
    return out


def read_d4rl_file(path: Path) -> dict[str, Any]:
    """Every numeric dataset (and text/number attribute) of the HDF5 file, as a nested dict.

    Raises:
        CheckpointError: naming ``path`` if it is no readable HDF5 file (truncated, garbage) or
            misses a required field.
    """
    import h5py

    try:
        with h5py.File(path, "r") as f:
            tree = _group(f, path, "")
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        raise CheckpointError(
            f"{_WHERE}: cannot read the HDF5 file {path} ({type(err).__name__}: {err}). The file "
            "is truncated or corrupted: download or write it again."
        ) from err
    missing = [k for k in REQUIRED if not isinstance(tree.get(k), torch.Tensor)]
    if missing:
        raise CheckpointError(
            f"{_WHERE}: the D4RL file {path} misses {missing} (got fields {sorted(tree)}; "
            f"expected {list(REQUIRED)}, optionally timeouts, next_observations, infos/*). "
            "Pass a D4RL dataset file."
        )
    n = tree["observations"].shape[0]
    for key, value in tree.items():
        if key in ("metadata", "infos") or not isinstance(value, torch.Tensor):
            continue
        if value.dim() == 0 or value.shape[0] != n:
            raise CheckpointError(
                f"{_WHERE}: field {key!r} of {path} has {value.shape[0] if value.dim() else 0} "
                f"rows (expected {n}, as observations). The file is corrupted."
            )
    return tree


def _shifted(value: torch.Tensor) -> torch.Tensor:
    """The previous step's value at each step (zero at the first), as TorchRL's root entries."""
    out = torch.zeros_like(value)
    out[1:] = value[:-1]
    return out


def d4rl_to_tensordict(tree: dict[str, Any], use_truncated_as_done: bool) -> TensorDict:
    """The TorchRL layout of D4RL arrays (``N`` rows in, ``N - 1`` transitions out).

    Row ``i`` holds ``observation``/``action`` of step ``i``; ``("next", "observation")`` is
    ``next_observations[i]`` when the file has it, else ``observations[i + 1]``, and is zeroed
    where ``("next", "done")``; ``("next", "reward"/"terminated"/"truncated"/"done")`` are
    step ``i``'s (``done = terminated | truncated`` with ``use_truncated_as_done``, else
    ``terminated``); the root ``reward``/``done``/``terminated``/``truncated`` are the previous
    step's (zero at row 0). ``info`` (from ``infos/*``) is row ``i``'s at the root and row
    ``i + 1``'s in ``next``. ``episode`` counts the trajectories, which end at ``next`` done.
    """
    n = tree["observations"].shape[0] - 1
    terminated = tree["terminals"].bool()[:, None]
    truncated = tree["timeouts"].bool()[:, None] if "timeouts" in tree else None
    done = terminated | truncated if use_truncated_as_done and truncated is not None else terminated
    flags = {"done": done, "terminated": terminated}
    if truncated is not None:
        flags["truncated"] = truncated
    reward = tree["rewards"][:, None]
    nxt: dict[str, Any] = {k: v[:n] for k, v in flags.items()}
    nxt["reward"] = reward[:n]
    if isinstance(tree.get("next_observations"), torch.Tensor):
        nxt["observation"] = tree["next_observations"][:n].clone()
    else:
        nxt["observation"] = tree["observations"][1:].clone()
    nxt["observation"][nxt["done"].squeeze(-1)] = 0
    root: dict[str, Any] = {
        "observation": tree["observations"][:n],
        "action": tree["actions"][:n],
        "reward": _shifted(reward[:n]),
        **{k: _shifted(v[:n]) for k, v in flags.items()},
    }
    for key, value in tree.items():  # extra per-step fields ride along at the root
        if key not in (*REQUIRED, "timeouts", "next_observations", "metadata", "infos"):
            if isinstance(value, torch.Tensor):
                root[key] = value[:n]
    infos = tree.get("infos")
    if isinstance(infos, dict) and infos:
        root["info"], nxt["info"] = _info_pair(infos, n)
    started = _shifted(nxt["done"].squeeze(-1))
    root["episode"] = started.long().cumsum(0)
    root["next"] = nxt
    return TensorDict(root, batch_size=[n])


def _info_pair(infos: dict[str, Any], n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    now: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            now[key], after[key] = _info_pair(value, n)
        elif isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == n + 1:
            now[key], after[key] = value[:n], value[1:]
    return now, after
