"""Does a dataset fit an env? Compares the stored leaves with the env's specs."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.errors import SpecError

__all__ = ["check_dataset_matches_env"]

_WHERE = "check_dataset_matches_env"


def check_dataset_matches_env(buffer: Any, env: Any) -> None:
    """Raises ``SpecError`` unless every observation and action leaf of ``env`` is stored in
    ``buffer`` with the env's per-step shape and dtype.

    Checks each leaf of ``env.full_observation_spec`` (at the root and under ``"next"``) and
    of ``env.full_action_spec``; the message names the key, the expected spec and what the
    dataset holds. Rewards are not checked (datasets often store float64 rewards). Dataset
    keys the env does not have (``"episode"``, ``"info"``) are fine.

    Args:
        buffer: a dataset (any replay buffer whose storage holds data), or a TensorDict of
            stored steps.
        env: a tdrl env (unbatched, or batched: its batch dims are ignored).

    Examples:
        >>> from tdrl.envs import PendulumEnv
        >>> env = PendulumEnv()
        >>> data = env.rollout(3)
        >>> check_dataset_matches_env(data, env)
        >>> try:
        ...     check_dataset_matches_env(data.exclude("action"), env)
        ... except SpecError as err:
        ...     print(str(err)[:60])
        check_dataset_matches_env: the dataset has no key 'action' (
    """
    data = buffer if isinstance(buffer, TensorDictBase) else buffer[:1]
    if data.ndim:
        data = data.reshape(-1)[:1]
    batch = tuple(env.batch_size)
    pairs = [("", env.full_observation_spec), ("next", env.full_observation_spec)]
    pairs.append(("", env.full_action_spec))
    for prefix, composite in pairs:
        for key, spec in composite.items(include_nested=True, leaves_only=True):
            path = (prefix, *_tuple(key)) if prefix else _tuple(key)
            full = path if len(path) > 1 else path[0]
            value = data.get(full, None)
            if value is None:
                raise SpecError(
                    f"{_WHERE}: the dataset has no key {full!r} (got keys "
                    f"{sorted(map(str, data.keys(True, True)))}; expected every key of the env's "
                    "specs). Record the dataset on this env, or rename the keys with a transform."
                )
            want = tuple(spec.shape)[len(batch) :]
            got = tuple(value.shape[data.ndim :])
            if got != want or value.dtype != spec.dtype:
                raise SpecError(
                    f"{_WHERE}: key {full!r} does not match the env (got shape {got} and dtype "
                    f"{value.dtype}; expected shape {want} and dtype {spec.dtype} from "
                    f"{type(spec).__name__}). Build the env the dataset was recorded on (for a "
                    "discrete action stored as an index use categorical_action_encoding=True)."
                )


def _tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
