"""Converts the episodes of a ``minari.MinariDataset`` into TorchRL's flat step layout."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from tdrl.errors import CheckpointError

__all__ = ["LayoutError", "dataset_metadata", "episodes_to_tensordict"]


class LayoutError(ValueError):
    """The dataset is readable but its layout has no tensor form in tdrl."""


def _tree(value: Any, what: str) -> Any:
    """Numpy arrays (possibly in nested dicts) as tensors; ``None`` for what has no tensor form."""
    if isinstance(value, Mapping):
        out = {str(k): _tree(v, f"{what}/{k}") for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(value, tuple | list):
        raise LayoutError(
            f"MinariExperienceReplay: {what} is a tuple (got {type(value).__name__}; expected "
            "arrays or dicts of arrays). Record the dataset with a Dict space instead of Tuple."
        )
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        return None  # text (TorchRL keeps it as non-tensor data; tdrl stores tensors only)
    return torch.from_numpy(np.ascontiguousarray(array))


def _leaves(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves(v)]
    return [tree]


def _split_steps(tree: Any, steps: int, what: str, pad_first: bool) -> tuple[Any, Any]:
    """(values at each step, values after each step) of a ``[steps + 1]`` tree.

    ``pad_first``: leaves of ``steps`` rows (infos without the reset info) get a zero first
    row, as TorchRL's conversion does.
    """
    if isinstance(tree, dict):
        pairs = {k: _split_steps(v, steps, f"{what}/{k}", pad_first) for k, v in tree.items()}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    if pad_first and tree.shape[:1] == (steps,):
        tree = torch.cat([torch.zeros_like(tree[:1]), tree])
    if tree.shape[:1] != (steps + 1,):
        raise CheckpointError(
            f"MinariExperienceReplay: {what} has {tree.shape[0] if tree.dim() else 0} rows in an "
            f"episode of {steps} steps (expected {steps + 1}: the reset value, then one per "
            "step). The dataset file is corrupted; record it again."
        )
    return tree[:-1], tree[1:]


def _column(value: Any, steps: int, what: str) -> torch.Tensor:
    tensor = _tree(value, what)
    if not isinstance(tensor, torch.Tensor) or tensor.shape[:1] != (steps,):
        got = None if tensor is None else getattr(tensor, "shape", type(tensor).__name__)
        raise CheckpointError(
            f"MinariExperienceReplay: {what} does not hold one value per step (got {got}; "
            f"expected {steps} rows). The dataset file is corrupted; record it again."
        )
    return tensor


def _episode(episode: Any) -> TensorDict:
    eid, steps = int(episode.id), len(episode.rewards)
    what = f"episode {eid}"
    obs_now, obs_next = _split_steps(
        _tree(episode.observations, f"{what} observations"), steps, f"{what} observations", False
    )
    terminated = _column(episode.terminations, steps, f"{what} terminations").bool()[:, None]
    truncated = _column(episode.truncations, steps, f"{what} truncations").bool()[:, None]
    nxt: dict[str, Any] = {
        "observation": obs_next,
        "reward": _column(episode.rewards, steps, f"{what} rewards")[:, None],
        "terminated": terminated,
        "truncated": truncated,
        "done": terminated | truncated,
    }
    root: dict[str, Any] = {
        "observation": obs_now,
        "action": _tree(episode.actions, f"{what} actions"),
        "episode": torch.full((steps,), eid, dtype=torch.int64),
        "next": nxt,
    }
    for leaf in _leaves(root["action"]):
        if leaf.shape[:1] != (steps,):
            raise CheckpointError(
                f"MinariExperienceReplay: {what} actions have {leaf.shape[0]} rows (expected "
                f"{steps}). The dataset file is corrupted; record it again."
            )
    infos = _tree(episode.infos or {}, f"{what} infos")
    if infos:
        root["info"], nxt["info"] = _split_steps(infos, steps, f"{what} infos", True)
    return TensorDict(root, batch_size=[steps])


def episodes_to_tensordict(dataset: Any) -> TensorDict:
    """Every episode of ``dataset`` (in id order) as one ``[total_steps]`` TensorDict.

    Layout (TorchRL's): ``observation``, ``action``, ``episode`` (the Minari episode id),
    ``info`` (when the dataset records infos), and ``next``: ``observation``, ``reward``
    (``[N, 1]``), ``terminated``/``truncated``/``done`` (bool ``[N, 1]``), ``info``.
    """
    episodes = [_episode(ep) for ep in dataset.iterate_episodes(sorted(dataset.episode_indices))]
    if not episodes:
        raise CheckpointError(
            "MinariExperienceReplay: the dataset holds no episode (got 0; expected at least one). "
            "Record episodes before creating the dataset."
        )
    try:
        return torch.cat(episodes)
    except (RuntimeError, KeyError, ValueError) as err:
        raise CheckpointError(
            f"MinariExperienceReplay: the episodes do not share one layout ({err}). Record the "
            "dataset with fixed observation and info keys."
        ) from err


def _plain(value: Any) -> Any:
    """A JSON value of ``value`` (dataclasses as dicts, arrays as lists, others as text)."""
    return json.loads(json.dumps(value, default=lambda v: getattr(v, "tolist", lambda: str(v))()))


def dataset_metadata(dataset: Any) -> dict[str, Any]:
    """TorchRL's ``metadata``: the dataset spec as a dict, spaces in Minari's JSON form."""
    from minari.serialization import serialize_space

    spec = dataset.spec
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    env_spec = fields.get("env_spec")
    meta: dict[str, Any] = {}
    for name, value in fields.items():
        if name in ("observation_space", "action_space"):
            try:
                meta[name] = serialize_space(value, to_string=False)
            except NotImplementedError:
                meta[name] = None
        elif name == "env_spec" and env_spec is not None:
            meta[name] = _plain(dataclasses.asdict(env_spec))
        else:
            meta[name] = _plain(value)
    return meta
