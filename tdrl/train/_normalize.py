"""Observation normalisation of a run (the config's ``[normalize]`` table): running statistics
on the training env, the same statistics frozen on the evaluation envs, kept in checkpoints."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tdrl.envs import EnvBase
from tdrl.envs.transforms import ClipTransform, Compose, TransformedEnv, VecNorm

__all__ = ["ObsNormalizer"]

_KEYS = ("observation", "decay", "eps", "clip")
_NAMES = ("observation_sum", "observation_ssq", "observation_count")


class _Stats(nn.Module):
    """VecNorm's observation statistics as float64 buffers (what checkpoints hold)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        for name in _NAMES:
            self.register_buffer(name, torch.zeros(features, dtype=torch.float64))


class ObsNormalizer:
    """``[normalize] observation = true``: the training env normalises ``"observation"`` with
    a :class:`~tdrl.envs.transforms.VecNorm` (``decay``, ``eps``), clipped to ``+-clip`` after
    (Stable-Baselines3's ``VecNormalize(norm_obs=True, clip_obs=...)``); evaluation envs use
    the same statistics frozen. :attr:`state` holds them for checkpoints.

    Examples:
        >>> from tdrl.train._builders import make_env
        >>> norm = ObsNormalizer.from_config({"normalize": {"observation": True}})
        >>> env = norm.wrap_train(make_env("Pendulum", 2, seed=0))
        >>> _ = env.rollout(5)
        >>> norm.save()
        >>> norm.state.observation_count.tolist()  # 2 rows at the reset, then 2 per step
        [12.0, 12.0, 12.0]
    """

    def __init__(self, decay: float = 1.0, eps: float = 1e-8, clip: float = 10.0) -> None:
        self.decay, self.eps, self.clip = decay, eps, clip
        self.train_norm: VecNorm | None = None
        self.state: nn.Module = nn.Module()
        self._evals: dict[int, tuple[EnvBase, EnvBase, Any]] = {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ObsNormalizer | None:
        """The normaliser of a config's ``[normalize]`` table (None without one, or when its
        ``observation`` is false)."""
        table = config.get("normalize")
        if not table:
            return None
        unknown = sorted(set(table) - set(_KEYS))
        if unknown or not isinstance(table.get("observation", False), bool):
            raise ValueError(
                f"tdrl train: bad [normalize] table (got {table}; expected the keys {_KEYS} "
                "with observation a bool). Fix the config."
            )
        if not table.get("observation", False):
            return None
        clip = float(table.get("clip", 10.0))
        if clip <= 0:
            raise ValueError(
                f"tdrl train: normalize.clip must be > 0 (got {clip}; expected e.g. 10.0, "
                "Stable-Baselines3's clip_obs)."
            )
        return cls(float(table.get("decay", 1.0)), float(table.get("eps", 1e-8)), clip)

    def _transform(self) -> Compose:
        norm = VecNorm(["observation"], decay=self.decay, eps=self.eps)
        return Compose(norm, ClipTransform(["observation"], low=-self.clip, high=self.clip))

    def wrap_train(self, env: EnvBase) -> EnvBase:
        """``env`` normalised by running statistics (updated by every step and reset)."""
        features = int(env.observation_spec["observation"].shape[-1])
        self.state = _Stats(features)
        transform = self._transform()
        self.train_norm = transform[0]  # type: ignore[assignment]
        return TransformedEnv(env, transform)

    def wrap_eval(self, env: EnvBase) -> EnvBase:
        """``env`` normalised by today's statistics, frozen; the same wrapper (refreshed) on
        every call for the same ``env``."""
        self.save()
        cached = self._evals.get(id(env))
        if cached is None or cached[0] is not env:
            transform = self._transform()
            cached = self._evals[id(env)] = (env, TransformedEnv(env, transform), transform[0])
        norm = cached[2]
        if self._seen() > 0:
            norm.set_extra_state({n: getattr(self.state, n).clone() for n in _NAMES})
        norm.freeze()
        return cached[1]

    def _seen(self) -> float:
        """The largest count of :attr:`state` (0: no statistics)."""
        count: torch.Tensor = getattr(self.state, "observation_count", torch.zeros(1))
        return float(count.max())

    def save(self) -> None:
        """Copies the training statistics into :attr:`state` (before a checkpoint)."""
        if self.train_norm is None:
            return
        # VecNorm's statistics of its first (only) key: sum_0, sumsq_0, count_0 (float64)
        values = [getattr(self.train_norm, f"{stat}_0") for stat in ("sum", "sumsq", "count")]
        if values[2] is None:
            return  # nothing seen yet, or statistics loaded into state alone (tdrl eval)
        for name, value in zip(_NAMES, values):
            target: torch.Tensor = getattr(self.state, name)
            target.copy_(value.reshape(-1))

    def load(self) -> None:
        """Puts the statistics of :attr:`state` (restored from a checkpoint) back into the
        training env's normaliser."""
        if self.train_norm is None or self._seen() == 0:
            return
        self.train_norm.set_extra_state({n: getattr(self.state, n).clone() for n in _NAMES})
