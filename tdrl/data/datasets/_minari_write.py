"""Write Minari datasets (the on-disk layout of Minari 0.5) with h5py, without Minari's jax.

Minari's ``DataCollector`` buffers steps with ``jax.tree_util`` (a ~340 MB dependency); this
writer produces the same files from TorchRL-layout episodes: ``<datasets dir>/<id>/data/``
holding ``main_data.hdf5`` (one ``episode_<i>`` group per episode: ``observations`` with one
more entry than ``actions``, ``rewards`` float64, ``terminations``/``truncations`` bool, an
empty ``infos`` group, and the attributes ``id``, ``total_steps``, ``rewards_*`` as Minari's
default ``EpisodeMetadataCallback`` writes them) and ``metadata.json`` (the serialized spaces,
the gymnasium ``env_spec``, counts and descriptive fields), plus the ``namespace_metadata.json``
of each namespace level. ``minari.load_dataset`` reads the result.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["minari_dataset_path", "write_minari_dataset"]

_WHERE = "write_minari_dataset"
_MAIN = "main_data.hdf5"
_META = "metadata.json"
_NAMESPACE_META = "namespace_metadata.json"
_TMP = ".tmp-"


def _minari() -> Any:
    try:
        import minari
    except ImportError as err:
        raise ImportError(
            f"{_WHERE}: the minari package is needed to describe the dataset's spaces (got "
            f"ImportError: {err}; expected minari>=0.5). Install it: pip install 'tdrl[offline]'."
        ) from err
    return minari


def minari_dataset_path(dataset_id: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of a Minari dataset: ``<root>/<dataset_id>`` (the ``data/`` folder's parent).

    ``root`` defaults to Minari's datasets folder: ``$MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets`` (where ``minari.load_dataset`` looks).

    Examples:
        >>> minari_dataset_path("pendulum/expert-v0", root="/data").as_posix()
        '/data/pendulum/expert-v0'
    """
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except ValueError:
        raise ValueError(
            f"{_WHERE}: malformed dataset id (got {dataset_id!r}; expected "
            "'(namespace/)name-v<version>' with letters, digits, '-' and '_', e.g. "
            "'pendulum/sac-expert-v0'). Rename the dataset."
        ) from None
    if root is None:
        env_root = os.environ.get("MINARI_DATASETS_PATH")
        base = Path(env_root) if env_root else Path.home() / ".minari" / "datasets"
    else:
        base = Path(root)
    return base / dataset_id


def write_minari_dataset(
    dataset_id: str,
    episodes: Iterable[Any],
    *,
    env_id: str | None,
    observation_space: Any = None,
    action_space: Any = None,
    root: str | os.PathLike[str] | None = None,
    algorithm_name: str = "unknown",
    author: str | set[str] | None = None,
    author_email: str | set[str] | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    eval_env: str | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    append: bool = False,
) -> Path:
    """Writes episodes as a Minari dataset that ``minari.load_dataset(dataset_id)`` reads.

    Each episode is a TensorDict of batch ``[T]`` in TorchRL's layout (root ``"observation"``
    and ``"action"``; ``("next", "observation")``, ``("next", "reward")``,
    ``("next", "terminated")``, optionally ``("next", "truncated")``), or a nested dict of
    arrays with the same keys. Dict observation spaces read nested entries
    (``("observation", key)``); one-hot actions of a ``Discrete`` space are stored as indices.
    An episode that neither terminates nor is truncated at its last step is stored truncated
    there (as Minari's ``DataCollector`` does with an episode cut by a reset). The files are
    built in a hidden temporary sibling folder and renamed into place: a failed write leaves
    nothing behind, an existing dataset is never half-replaced.

    Args:
        dataset_id: ``(namespace/)name-v<version>``.
        episodes: the episodes, in order (their ids are their positions).
        env_id: the gymnasium id the data was recorded on (its ``EnvSpec`` goes into
            ``metadata.json`` so ``MinariDataset.recover_environment()`` rebuilds it), or None.
        observation_space: a gymnasium space (default: the env's).
        action_space: a gymnasium space (default: the env's).
        root: the datasets folder (default: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``).
        algorithm_name, author, author_email, code_permalink, description: Minari's
            descriptive metadata (the ``None`` ones are left out, as Minari does).
        eval_env: a gymnasium id for evaluation when it differs from ``env_id``.
        extra_metadata: more JSON entries for ``metadata.json`` (e.g. tdrl's env name).
        overwrite: replace an existing dataset of that id.
        append: add the episodes after those of an existing dataset of that id (same spaces
            and env); its metadata is kept, authors are merged and a different
            ``algorithm_name`` is joined with ``" + "`` (a mixed dataset).

    Returns:
        The dataset folder (``<root>/<dataset_id>``).

    Raises:
        FileExistsError: the dataset exists and neither ``overwrite`` nor ``append`` is set.
        ValueError: a malformed id, no episode, or an episode that does not fit the spaces.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> ep = TensorDict({"observation": torch.zeros(3, 3), "action": torch.zeros(3, 1),
        ...     "next": {"observation": torch.zeros(3, 3), "reward": torch.ones(3, 1),
        ...              "terminated": torch.zeros(3, 1, dtype=torch.bool)}}, [3])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = write_minari_dataset("pendulum/demo-v0", [ep], env_id="Pendulum-v1",
        ...                                 root=d)
        ...     print(sorted(p.name for p in (path / "data").iterdir()))
        ['main_data.hdf5', 'metadata.json']
    """
    if overwrite and append:
        raise ValueError(
            f"{_WHERE}: overwrite and append are exclusive (got both True; expected at most "
            "one). Pass overwrite=True to replace the dataset or append=True to extend it."
        )
    final = minari_dataset_path(dataset_id, root)
    gym_spaces = _spaces(env_id, observation_space, action_space)
    exists = (final / "data" / _META).exists()
    if exists and not (overwrite or append):
        raise FileExistsError(
            f"{_WHERE}: the dataset {dataset_id!r} already exists (got {final}; expected a new "
            "id). Pass overwrite=True to replace it, append=True to add episodes to it, or "
            "choose another id or version."
        )
    env_spec = _env_spec_json(env_id)
    eval_spec = _env_spec_json(eval_env) if eval_env is not None else None
    serialize = _minari().serialization.serialize_space
    spaces_json = (serialize(gym_spaces[0]), serialize(gym_spaces[1]))
    previous = _read_existing(final, spaces_json, env_spec) if exists and append else None
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"{_TMP}{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        data = tmp / "data"
        data.mkdir(parents=True)
        start = 0
        if previous is not None:
            shutil.copyfile(final / "data" / _MAIN, data / _MAIN)
            start = int(previous["total_episodes"])
        n_eps, n_steps = _write_episodes(data / _MAIN, episodes, gym_spaces, start)
        info = {
            "dataset_id": dataset_id,
            "algorithm_name": algorithm_name,
            "author": author,
            "author_email": author_email,
            "code_permalink": code_permalink,
            "description": description,
        }
        meta = _metadata(previous, info, spaces_json, env_spec, eval_spec, extra_metadata)
        meta["total_episodes"] = start + n_eps
        meta["total_steps"] = int(meta.get("total_steps", 0)) + n_steps
        meta["dataset_size"] = round(os.path.getsize(data / _MAIN) / 1e6, 1)
        _write_json(data / _META, meta)
        _fsync(data / _MAIN)
        _fsync(data)
        _fsync(tmp)
        _move_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_namespaces(final, dataset_id)
    return final


# ---------------------------------------------------------------------------- spaces, metadata
def _spaces(env_id: str | None, obs_space: Any, act_space: Any) -> tuple[Any, Any]:
    if obs_space is not None and act_space is not None:
        return obs_space, act_space
    if env_id is None:
        raise ValueError(
            f"{_WHERE}: no spaces (got env_id=None and observation_space={obs_space!r}, "
            f"action_space={act_space!r}; expected a gymnasium env id or both spaces). Pass "
            "env_id or the two gymnasium spaces."
        )
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return (
            obs_space if obs_space is not None else env.observation_space,
            act_space if act_space is not None else env.action_space,
        )
    finally:
        env.close()


def _env_spec_json(env_id: str | None) -> str | None:
    if env_id is None:
        return None
    import gymnasium as gym

    try:
        spec = gym.spec(env_id)
    except gym.error.Error as err:
        raise ValueError(
            f"{_WHERE}: unknown gymnasium env id (got {env_id!r}: {err}; expected a registered "
            "id such as 'Pendulum-v1'). Pass env_id=None with both spaces for a non-gymnasium "
            "env, and record its name with extra_metadata."
        ) from None
    return str(spec.to_json())


def _as_set(value: str | set[str] | None) -> list[str] | None:
    if value is None:
        return None
    return sorted({value} if isinstance(value, str) else set(value))


def _metadata(
    previous: dict[str, Any] | None,
    info: dict[str, Any],
    spaces_json: tuple[str, str],
    env_spec: str | None,
    eval_spec: str | None,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``metadata.json`` object (keys in the order Minari writes them)."""
    if previous is not None:
        meta = dict(previous)
        for key in ("author", "author_email"):
            merged = set(meta.get(key) or []) | set(_as_set(info[key]) or [])
            if merged:
                meta[key] = sorted(merged)
        names = str(meta.get("algorithm_name", "")).split(" + ")
        if info["algorithm_name"] not in names:
            meta["algorithm_name"] = " + ".join([*filter(None, names), info["algorithm_name"]])
        for key in ("code_permalink", "description"):
            if info[key] is not None and key not in meta:
                meta[key] = info[key]
        meta.update(extra or {})
        return meta
    meta = {
        "total_episodes": 0,
        "total_steps": 0,
        "data_format": "hdf5",
        # raw arrays: lossless image observations (Minari JPEG-encodes image spaces when true)
        "jpeg_encoding": False,
        "observation_space": spaces_json[0],
        "action_space": spaces_json[1],
    }
    if env_spec is not None:
        meta["env_spec"] = env_spec
    meta["dataset_size"] = 0.0
    meta["dataset_id"] = info["dataset_id"]
    for key in ("code_permalink", "author", "author_email", "algorithm_name", "description"):
        value = _as_set(info[key]) if key.startswith("author") else info[key]
        if value is not None:
            meta[key] = value
    if eval_spec is not None:
        meta["eval_env_spec"] = eval_spec
    meta["minari_version"] = str(_minari().__version__)
    meta.update(extra or {})
    return meta


def _read_existing(final: Path, spaces_json: tuple[str, str], env_spec: str | None) -> Any:
    path = final / "data" / _META
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{_WHERE}: cannot append to {final}: its metadata is unreadable (got {err}; "
            "expected Minari's metadata.json). Write a new dataset instead."
        ) from err
    old = (meta.get("observation_space"), meta.get("action_space"), meta.get("env_spec"))
    if old != (*spaces_json, env_spec):
        raise ValueError(
            f"{_WHERE}: cannot append to {final}: its spaces or env differ (got spaces "
            f"{spaces_json} on {env_spec}; expected the dataset's {old[:2]} on {old[2]}). "
            "Append episodes of the same env, or write a new dataset."
        )
    if meta.get("jpeg_encoding", True) and any(map(_is_image, spaces_json)):
        raise ValueError(
            f"{_WHERE}: cannot append to {final}: its image observations are JPEG-encoded (got "
            "jpeg_encoding=true; expected raw arrays, which this writer stores). Write a new "
            "dataset instead."
        )
    if meta.get("data_format", "hdf5") != "hdf5" or not (final / "data" / _MAIN).is_file():
        raise ValueError(
            f"{_WHERE}: cannot append to {final} (got data_format "
            f"{meta.get('data_format')!r}; expected 'hdf5' with {_MAIN}). Write a new dataset."
        )
    return meta


def _is_image(space_json: str) -> bool:
    from minari.dataset.minari_storage import is_image_space

    space = _minari().serialization.deserialize_space(space_json)
    import gymnasium as gym

    subspaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
    return any(is_image_space(s) for s in subspaces)


# ---------------------------------------------------------------------------- episodes
def _write_episodes(
    path: Path, episodes: Iterable[Any], spaces: tuple[Any, Any], start: int
) -> tuple[int, int]:
    """Appends ``episode_<start + i>`` groups to the HDF5 file; returns (episodes, steps)."""
    import h5py

    n_eps = n_steps = 0
    with h5py.File(path, "a", track_order=True) as f:
        for i, episode in enumerate(episodes):
            arrays = _episode_arrays(episode, spaces, i)
            group = f.create_group(f"episode_{start + i}")
            steps = int(arrays["rewards"].shape[0])
            group.attrs["id"] = np.int64(start + i)
            group.attrs["total_steps"] = np.int64(steps)
            _write_tree(group, arrays)
            group.create_group("infos")
            rewards = arrays["rewards"]
            for stat in ("sum", "mean", "std", "max", "min"):
                group.attrs[f"rewards_{stat}"] = float(getattr(rewards, stat)())
            n_eps += 1
            n_steps += steps
    if not n_eps:
        raise ValueError(
            f"{_WHERE}: no episode to write (got an empty iterable; expected at least one "
            "episode). Collect episodes first."
        )
    return n_eps, n_steps


def _write_tree(group: Any, arrays: Mapping[str, Any]) -> None:
    for key, value in arrays.items():
        if isinstance(value, Mapping):
            _write_tree(group.create_group(key), value)
        else:
            group.create_dataset(key, data=value, chunks=True, maxshape=(None, *value.shape[1:]))


def _entry(episode: Any, key: tuple[str, ...], i: int, required: bool = True) -> Any:
    node = episode
    for part in key:
        if not (hasattr(node, "keys") and part in node.keys()):
            if not required:
                return None
            have = list(node.keys(True, True)) if hasattr(node, "batch_size") else list(node)
            raise KeyError(
                f"{_WHERE}: episode {i} has no entry {key!r} (got the keys {have}; expected "
                "TorchRL's layout: observation, action and next/observation, next/reward, "
                "next/terminated). Pass per-episode TensorDicts of a rollout."
            )
        node = node[part]
    return node


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _episode_arrays(episode: Any, spaces: tuple[Any, Any], i: int) -> dict[str, Any]:
    """One episode in Minari's layout (numpy arrays, nested dicts for Dict spaces)."""
    obs_space, act_space = spaces
    reward = _numpy(_entry(episode, ("next", "reward"), i)).astype(np.float64)
    steps = reward.shape[0] if reward.ndim else 0
    if steps == 0:
        raise ValueError(
            f"{_WHERE}: episode {i} has no step (got a reward of shape {reward.shape}; "
            "expected [T, 1] with T >= 1). Drop empty episodes."
        )
    terminated = _flag(episode, "terminated", i, steps, required=True)
    truncated = _flag(episode, "truncated", i, steps, required=False)
    ended = terminated | truncated
    if ended[:-1].any():
        at = int(np.flatnonzero(ended[:-1])[0])
        raise ValueError(
            f"{_WHERE}: episode {i} ends at step {at} before its last step {steps - 1} (got "
            "terminated/truncated there; expected one episode per entry). Split the data at "
            "its done flags."
        )
    if not ended[-1]:  # cut off without an end: Minari's DataCollector marks it truncated
        truncated = truncated.copy()
        truncated[-1] = True
    return {
        "observations": _observations(episode, obs_space, ("observation",), i, steps),
        "actions": _leaf(_entry(episode, ("action",), i), act_space, "action", i, steps),
        "rewards": reward.reshape(steps, -1)[:, 0] if reward.ndim > 1 else reward,
        "terminations": terminated,
        "truncations": truncated,
    }


def _flag(episode: Any, name: str, i: int, steps: int, *, required: bool) -> np.ndarray:
    value = _entry(episode, ("next", name), i, required=required)
    if value is None:
        return np.zeros(steps, dtype=bool)
    flag = _numpy(value).astype(bool)
    if flag.shape not in ((steps,), (steps, 1)):
        raise ValueError(
            f"{_WHERE}: episode {i}'s ('next', {name!r}) has the wrong shape (got "
            f"{tuple(flag.shape)}; expected ({steps}, 1) like the reward). Pass one episode "
            "of batch [T] per entry."
        )
    return flag.reshape(steps)


def _observations(episode: Any, space: Any, key: tuple[str, ...], i: int, steps: int) -> Any:
    """``T + 1`` observations: the root ones and the last next one (a Dict space nests)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return {k: _observations(episode, sub, (*key, k), i, steps) for k, sub in space.items()}
    name = "/".join(key)
    now = _leaf(_entry(episode, key, i), space, name, i, steps)
    nxt = _leaf(_entry(episode, ("next", *key), i), space, f"next/{name}", i, steps)
    same = np.array_equal(now[1:], nxt[:-1], equal_nan=now.dtype.kind in "fc")
    if not same:
        raise ValueError(
            f"{_WHERE}: episode {i}'s {name!r} is not contiguous (got a root observation that "
            "differs from the previous step's next one; expected the steps of one episode in "
            "order). Pass each episode's steps in order, split at its done flags."
        )
    return np.concatenate([now, nxt[-1:]])


def _leaf(value: Any, space: Any, name: str, i: int, steps: int) -> np.ndarray:
    """An entry as the space stores it: the space's dtype, one-hot actions as indices."""
    import gymnasium as gym

    arr = _numpy(value)
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        if arr.ndim == 2 and arr.shape[1] == n and n > 1 and arr.shape[0] == steps:
            if not ((arr == 0) | (arr == 1)).all() or (arr.sum(-1) != 1).any():
                raise ValueError(
                    f"{_WHERE}: episode {i}'s {name!r} is not one-hot (got rows that are not a "
                    f"single 1 among {n}; expected one-hot or index values of Discrete({n})). "
                    "Pass the env's actions."
                )
            arr = arr.argmax(-1) + int(space.start)
        elif arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        expected: tuple[int, ...] = (steps,)
    elif isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        expected = (steps, *space.shape)
    else:
        raise ValueError(
            f"{_WHERE}: unsupported space for {name!r} (got {space}; expected Box, Discrete, "
            "MultiBinary, MultiDiscrete or a Dict of them). Convert the data to one of them."
        )
    if tuple(arr.shape) != expected:
        raise ValueError(
            f"{_WHERE}: episode {i}'s {name!r} does not fit the space (got shape "
            f"{tuple(arr.shape)}; expected {expected} for {space}). Pass one episode of batch "
            "[T] per entry, recorded on the dataset's env."
        )
    return arr.astype(space.dtype, copy=False)


# ---------------------------------------------------------------------------- files
def _write_json(path: Path, obj: Any) -> None:
    with path.open("w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(tmp: Path, final: Path) -> None:
    """Renames ``tmp`` to ``final``; a dataset already there is moved aside first, put back
    if the rename fails and removed once the new one is in place."""
    if not final.exists():
        tmp.rename(final)
        return
    aside = final.parent / f"{_TMP}old-{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
    final.rename(aside)
    try:
        tmp.rename(final)
    except BaseException:
        aside.rename(final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _write_namespaces(final: Path, dataset_id: str) -> None:
    """An empty ``namespace_metadata.json`` in each namespace level that has none (as
    Minari's ``create_namespace`` writes them)."""
    parts = dataset_id.split("/")[:-1]
    folder = final.parent
    for _ in parts:
        meta = folder / _NAMESPACE_META
        if not meta.exists():
            _write_json(meta, {})
        folder = folder.parent
