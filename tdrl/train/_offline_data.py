"""The dataset of an offline run: ``--dataset minari:<id>`` / ``d4rl:<path>``, the env it names,
the check that the two fit, and batches in the env's action encoding."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs import EnvBase
from tdrl.specs import Categorical, OneHot

__all__ = [
    "KINDS",
    "OfflineData",
    "env_for_dataset",
    "observation_stats",
    "open_dataset",
    "parse_dataset",
]

KINDS = ("minari", "d4rl")
# gymnasium ids whose dynamics, spaces and rewards tdrl's built-in envs reproduce (their docs
# say so): evaluation runs there (no gymnasium needed, and --resume restores their state).
_BUILTIN_EQUIVALENTS = {"Pendulum-v1": "Pendulum", "CartPole-v1": "CartPole"}
# What the losses read from a dataset batch (TorchRL's layout).
KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
)


def parse_dataset(spec: Any) -> tuple[str, str]:
    """``"minari:<id>"`` -> ``("minari", "<id>")``; ``"d4rl:<path or id>"`` likewise.

    Examples:
        >>> parse_dataset("minari:pendulum/sac-expert-v0")
        ('minari', 'pendulum/sac-expert-v0')
    """
    kind, sep, ref = str(spec).partition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or kind not in KINDS or not ref:
        raise ValueError(
            f"tdrl train --dataset: unknown dataset (got {spec!r}; expected 'minari:<dataset id>' "
            "or 'd4rl:<path to an HDF5 file or a D4RL id>'). Make one with `tdrl dataset "
            "collect RUN_DIR --episodes N --out <namespace>/<name>-v0`."
        )
    return kind, ref


def open_dataset(spec: str, batch_size: int, root: str | None = None) -> Any:
    """Opens the dataset ``spec`` as a replay buffer (``MinariExperienceReplay`` or
    ``D4RLExperienceReplay``, without downloading: a missing dataset is an error naming it).
    ``root``: where the converted copy goes (None: the loaders' default,
    ``~/.cache/tdrl/<kind>``). Minari datasets are read from the local Minari cache
    (``$MINARI_DATASETS_PATH``, where ``tdrl dataset collect`` writes)."""
    kind, ref = parse_dataset(spec)
    try:
        from tdrl.data import datasets
    except ImportError as err:  # the package or its optional dependencies
        raise ImportError(
            f"tdrl train --dataset: cannot read {spec!r} ({err}). Install the offline extra: "
            "pip install 'tdrl[offline]'."
        ) from err
    if kind == "minari":
        return datasets.MinariExperienceReplay(ref, batch_size, root=root, download=False)
    return datasets.D4RLExperienceReplay(ref, batch_size, root=root, download=False)


def env_for_dataset(env_id: str | None, source: str) -> str:
    """The ``tdrl train`` env name for a dataset's recorded gymnasium id: the built-in
    equivalent (``Pendulum-v1`` -> ``Pendulum``), a tdrl env name kept as is, else
    ``gym:<id>``.

    Examples:
        >>> env_for_dataset("Pendulum-v1", "minari:x")
        'Pendulum'
        >>> env_for_dataset("HalfCheetah-v4", "minari:x")
        'gym:HalfCheetah-v4'
    """
    if not env_id:
        raise ValueError(
            f"tdrl train: the dataset {source} names no env (got env_id={env_id!r}; expected "
            "the gymnasium id it was recorded on). Pass the env to evaluate in with --env."
        )
    if env_id in _BUILTIN_EQUIVALENTS:
        return _BUILTIN_EQUIVALENTS[env_id]
    if ":" in env_id or env_id in ("Pendulum", "CartPole"):
        return env_id
    return f"gym:{env_id}"


class OfflineData:
    """A dataset buffer checked against the env a run evaluates in; :meth:`sample` gives
    batches of the entries the losses read, the action in the env's encoding (a categorical
    index becomes one-hot for a one-hot env and back).

    Args:
        buffer: a replay buffer holding TorchRL's transition layout (``observation``,
            ``action``, ``("next", "observation" / "reward" / "done" / "terminated")``).
        env: the env of the run.
        source: the dataset's name in errors (``"minari:<id>"``).
        batch_size: the batch size of :meth:`sample`.

    Raises:
        KeyError: an entry the losses read is missing.
        ValueError: the observation or action does not fit the env's spec.
    """

    def __init__(self, buffer: Any, env: EnvBase, source: str, batch_size: int) -> None:
        self.buffer, self.source, self.batch_size = buffer, source, int(batch_size)
        if len(buffer) == 0:
            raise ValueError(
                f"tdrl train: the dataset {source} is empty (got 0 transitions; expected at "
                "least one). Collect episodes into it first."
            )
        probe = buffer[0:1]
        keys = set(probe.keys(True, True))
        missing = [k for k in KEYS if k not in keys]
        if missing:
            raise KeyError(
                f"tdrl train: the dataset {source} lacks the entries {missing} (got "
                f"{sorted(map(str, keys))}; expected TorchRL's transition layout). Write it with "
                "`tdrl dataset collect` or load it with MinariExperienceReplay."
            )
        self._keys = [k for k in KEYS if k in keys] + (
            [("next", "truncated")] if ("next", "truncated") in keys else []
        )
        self._encode = _check_fit(probe, env, source)
        # Minari stores float64 rewards (and whatever dtypes the recording env gave): the
        # networks and the env's data are float32, so other float entries are cast on sampling
        self._cast = [
            k
            for k in self._keys
            if probe.get(k).is_floating_point() and probe.get(k).dtype != torch.float32
        ]
        self.observation_norm: tuple[torch.Tensor, torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.buffer)

    def sample(self, batch_size: int | None = None) -> TensorDictBase:
        """A batch of ``batch_size`` (default: the constructor's) transitions."""
        batch = self.buffer.sample(batch_size or self.batch_size).select(*self._keys)
        for key in self._cast:
            batch.set(key, batch.get(key).to(torch.float32))
        if self._encode is not None:
            batch.set("action", self._encode(batch.get("action")))
        if self.observation_norm is not None:  # TD3+BC's state normalisation
            loc, scale = self.observation_norm
            for key in ("observation", ("next", "observation")):
                batch.set(key, (batch.get(key).to(torch.float32) - loc) / scale)
        return batch


def observation_stats(buffer: Any, eps: float = 1e-3) -> tuple[list[Any], list[Any]]:
    """The dataset's observation mean and standard deviation (+ ``eps``) per feature, as the
    TD3+BC paper (Fujimoto & Gu, 2021) normalises states: ``(s - mean) / (std + 1e-3)``.

    Examples:
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from tensordict import TensorDict
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(TensorDict({"observation": torch.tensor([[0.0, 1.0], [2.0, 1.0]])}, [2]))
        >>> observation_stats(rb)
        ([1.0, 1.0], [1.0010000467300415, 0.0010000000474974513])
    """
    obs = buffer[:].get("observation").to(torch.float64)
    mean, std = obs.mean(0), obs.std(0, unbiased=False) + eps
    return mean.float().tolist(), std.float().tolist()


def _check_fit(probe: TensorDictBase, env: EnvBase, source: str) -> Any:
    """Checks the dataset's observation and action against ``env``'s specs; returns the action
    conversion (or None)."""
    name = type(env).__name__
    obs_spec = env.observation_spec["observation"]
    obs = probe.get("observation")
    if obs.shape[1:] != obs_spec.shape[len(env.batch_size) :]:
        raise ValueError(
            f"tdrl train: the dataset {source} does not fit the env {name} (got observations of "
            f"shape {list(obs.shape[1:])}; expected {list(obs_spec.shape[len(env.batch_size) :])}"
            "). Evaluate in the env the dataset was recorded on (--env)."
        )
    spec = env.action_spec
    action = probe.get("action")
    shape = list(spec.shape[len(env.batch_size) :])
    if isinstance(spec, OneHot | Categorical):
        n = int(spec.n)  # type: ignore[attr-defined]
        if not action.dtype.is_floating_point and list(action.shape[1:]) in ([], [1]):
            if isinstance(spec, OneHot):
                return lambda a: torch.nn.functional.one_hot(a.reshape(-1).long(), n).to(spec.dtype)
            return None if list(action.shape[1:]) == shape else (lambda a: a.reshape(-1))
        if list(action.shape[1:]) == [n]:
            return None if isinstance(spec, OneHot) else (lambda a: a.argmax(-1))
        raise ValueError(
            f"tdrl train: the dataset {source} does not fit the env {name} (got actions of "
            f"shape {list(action.shape[1:])} {action.dtype}; expected indices or one-hot "
            f"vectors of {n} actions). Evaluate in the env the dataset was recorded on (--env)."
        )
    if list(action.shape[1:]) != shape or not action.dtype.is_floating_point:
        raise ValueError(
            f"tdrl train: the dataset {source} does not fit the env {name} (got actions of "
            f"shape {list(action.shape[1:])} {action.dtype}; expected float actions of shape "
            f"{shape}). Evaluate in the env the dataset was recorded on (--env)."
        )
    return None
