"""Offline training (IQL, CQL, TD3+BC, BC; the Decision Transformer subclasses it): gradient
updates on a dataset, evaluation in the env the dataset names, and optional online fine-tuning
(IQL here; online DT in ``_offline_odt``)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.objectives import SoftUpdate
from tdrl.train._logging import now
from tdrl.train._off_policy import gradient_step
from tdrl.train._offline_agents import make_offline_agent
from tdrl.train._offline_data import (
    OfflineData,
    env_for_dataset,
    observation_stats,
    open_dataset,
    parse_dataset,
)
from tdrl.train._trainer import Trainer

__all__ = ["OfflineTrainer"]

FINE_TUNED = ("iql", "dt")  # the presets that take ``online_frames`` (dt: online DT)


class OfflineTrainer(Trainer):
    """Trains on a dataset only: ``updates`` gradient steps on batches drawn from it, then,
    with ``online_frames`` > 0 (IQL; ``dt`` has its own online rounds), online fine-tuning.

    Progress counts gradient updates, not env frames: the budget is the config's ``updates``,
    evaluations come every ``eval.every_updates`` and checkpoints every
    ``logging.checkpoint_every_updates``; ``metrics.csv`` has an ``updates`` column (the
    learning curve's x axis) and ``frames`` (env frames: 0 until fine-tuning). Checkpoints hold
    the networks, optimizer, counters and RNG states, never the dataset: ``config.json`` keeps
    the ``dataset`` spec and ``--resume`` reopens it.

    Fine-tuning collects ``online.frames_per_batch`` frames at a time with the stochastic policy
    into a fresh replay buffer (checkpointed) and runs ``online.updates_per_frame`` updates per
    frame on batches of which ``online.dataset_fraction`` comes from the dataset and the rest
    from the new buffer (the dataset alone until that buffer holds one batch).

    Args:
        config: the run config (``dataset = "minari:<id>"`` or ``"d4rl:<path>"``; ``env``
            empty: the env the dataset names).
        out_dir: the run directory.
        dataset: a replay buffer to train on instead of ``config["dataset"]`` (pass it again
            to resume; its ``env_id`` or ``config["env"]`` names the env).
        **kwargs: as for :class:`~tdrl.train.Trainer` (no ``ray``).

    Examples:
        >>> import tempfile, torch
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from tdrl.envs import PendulumV1Env
        >>> from tdrl.train import load_config
        >>> env = PendulumV1Env(batch_size=(64,))
        >>> data = TensorDictReplayBuffer(storage=LazyTensorStorage(64))
        >>> _ = data.extend(env.rand_step(env.reset()))
        >>> cfg = load_config("iql", overrides=["env='Pendulum'", "updates=20",
        ...     "eval.every_updates=10", "eval.episodes=2", "model.hidden=[16]"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     summary = OfflineTrainer(cfg, d, dataset=data, quiet=True).run()
        >>> summary["updates"], summary["frames"]
        (20, 0)
    """

    progress_key = "updates"

    def __init__(
        self, config: dict[str, Any], out_dir: str | Path, *, dataset: Any = None, **kwargs: Any
    ) -> None:
        config = copy.deepcopy(config)
        if kwargs.get("ray") is not None:
            raise ValueError(
                f"tdrl train --ray: the offline preset {config['algorithm']!r} does not collect "
                "(got --ray; expected none). Drop --ray."
            )
        batch_size = int(config["buffer"]["batch_size"])
        source = str(config.get("dataset") or "the given buffer")
        if dataset is None:
            if not config.get("dataset"):
                raise ValueError(
                    f"tdrl train {config['algorithm']}: no dataset (got dataset={config.get('dataset')!r}; "
                    "expected 'minari:<id>' or 'd4rl:<path>'). Pass --dataset minari:<id>."
                )
            parse_dataset(config["dataset"])  # a malformed spec fails before anything opens
            dataset = open_dataset(
                config["dataset"], batch_size, config.get("dataset_root") or None
            )
        if not config.get("env"):
            config["env"] = env_for_dataset(getattr(dataset, "env_id", None), source)
        self.online_frames = int(config.get("online_frames", 0) or 0)
        if self.online_frames and config["algorithm"] not in FINE_TUNED:
            raise ValueError(
                f"tdrl train {config['algorithm']}: --online-frames fine-tunes {FINE_TUNED} "
                f"only (got online_frames={self.online_frames}). Drop it or use iql or dt."
            )
        norm = _observation_norm(config, dataset, self.online_frames)
        super().__init__(config, out_dir, **kwargs)
        self.data = OfflineData(dataset, self.env, source, batch_size)
        self.data.observation_norm = norm
        self._obs_norm = norm
        self.agent = make_offline_agent(config["algorithm"], self.env, config)
        self.policy = self.agent.policy
        oc = config["optim"]
        self.optimizer = torch.optim.Adam(
            self.agent.loss.parameters(),
            lr=float(oc["lr"]),
            weight_decay=float(oc.get("weight_decay", 0.0)),
        )
        tau = config.get("target", {}).get("tau")
        self.target = SoftUpdate(self.agent.loss, tau=float(tau)) if tau else None
        self.modules = {"loss": self.agent.loss}
        self.optimizers = {"optim": self.optimizer}
        self.env_frames = 0
        self._owed = 0.0
        self._next_eval = int(config.get("eval", {}).get("every_updates", 0) or 0)
        self._next_ckpt = int(config.get("logging", {}).get("checkpoint_every_updates", 0) or 0)
        if self.online_frames:
            oc = config["online"]
            self.buffer = TensorDictReplayBuffer(
                storage=LazyTensorStorage(int(oc["capacity"]), device=config.get("device", "cpu")),
                batch_size=batch_size,
            )

    def episode_returns(self, env: Any) -> list[float]:
        """As :meth:`Trainer.episode_returns`; with ``data.normalize_observations`` the
        policy sees the env's observations normalised with the dataset's statistics (those
        of ``config.json``: resume and ``tdrl eval`` reuse them)."""
        if self._obs_norm is not None:
            from tdrl.envs.transforms import ObservationNorm, TransformedEnv

            loc, scale = self._obs_norm
            env = TransformedEnv(env, ObservationNorm(loc, scale, standard_normal=True))
        return super().episode_returns(env)

    _obs_norm: tuple[torch.Tensor, torch.Tensor] | None = None

    # ------------------------------------------------------------------ budget
    def _budget(self) -> int:
        extra = self.online_frames * float(
            self.config.get("online", {}).get("updates_per_frame", 1)
        )
        return int(self.config["updates"]) + int(extra)

    @property
    def done(self) -> bool:
        return (
            (self.frames >= int(self.config["updates"]) and self.env_frames >= self.online_frames)
            or self.solved_at is not None
            or self.stopped is not None
        )

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "updates": self.frames, "frames": self.env_frames}

    # ------------------------------------------------------------------ training
    def _train(self) -> None:
        total = int(self.config["updates"])
        every = int(self.config.get("logging", {}).get("log_every_updates", 1000) or 1000)
        while not self.done and self.frames < total:
            # chunks end on multiples of `every` and at the evaluations and checkpoints due:
            # a resumed run keeps the same rows
            due = [d - self.frames for d in (self._next_eval, self._next_ckpt) if d > self.frames]
            n = min(every - self.frames % every, total - self.frames, *due)
            self._after_updates(self._updates(n, None), n, 0, None)
        if self.online_frames and not self.done:
            self._fine_tune()

    def _fine_tune(self) -> None:
        fpb = int(self.config["online"]["frames_per_batch"])
        collector = self._collector(self.agent.collect_policy, fpb)
        keys = self.data._keys
        try:
            while not self.done:
                batch = collector.rollout()  # the collector's memory: extend copies it out
                self.buffer.extend(batch.reshape(-1).select(*keys))
                self._owed += float(self.config["online"].get("updates_per_frame", 1)) * fpb
                n = int(self._owed)
                self._owed -= n
                self._after_updates(self._updates(n, self.buffer), n, fpb, batch)
        finally:
            collector.shutdown()

    def _updates(self, n: int, online: Any) -> dict[str, float]:
        """``n`` gradient steps; the mean of each loss term."""
        sums: dict[str, float] = {}
        for _ in range(n):
            for k, v in self._update_once(self._batch(online)).items():
                sums[k] = sums.get(k, 0.0) + v
        return {k: v / max(n, 1) for k, v in sums.items()}

    def _batch(self, online: Any) -> TensorDictBase:
        size = self.data.batch_size
        if online is None or len(online) < size:
            return self.data.sample()
        k = round(size * float(self.config["online"].get("dataset_fraction", 0.5)))
        parts = [self.data.sample(k)] if k else []
        if size - k:
            parts.append(online.sample(size - k).select(*self.data._keys))
        return torch.cat(parts, 0) if len(parts) > 1 else parts[0]

    def _update_once(self, batch: TensorDictBase) -> dict[str, float]:
        out = gradient_step(
            self.agent, self.optimizer, self.target, self.config, batch, self._steps
        )
        self._steps += 1
        return out

    _steps = 0  # updates run so far (the policy delay's clock; set from the counters on resume)

    def _after_updates(
        self, losses: dict[str, float], updates: int, frames: int, batch: Any
    ) -> None:
        """Bookkeeping after ``updates`` gradient steps (and ``frames`` collected ones):
        a metrics row, evaluation and checkpoint when due."""
        self.frames += updates
        self.env_frames += frames
        self.iteration += 1
        elapsed = now() - self._t0
        row: dict[str, Any] = {
            "iteration": self.iteration,
            "updates": self.frames,
            "frames": self.env_frames,
            "time": round(elapsed, 3),
            "updates_per_s": round(updates / max(elapsed - self._last_time, 1e-9), 1),
            **losses,
            **(self._train_columns(batch) if batch is not None else {}),
        }
        self._last_time = elapsed
        ec, lc = self.config.get("eval", {}), self.config.get("logging", {})
        if self._next_eval and self.frames >= self._next_eval:
            row.update(self._eval_columns())
            while self._next_eval <= self.frames:
                self._next_eval += int(ec["every_updates"])
        self.logger.log(row)
        if self._next_ckpt and self.frames >= self._next_ckpt:
            self.elapsed = elapsed
            while self._next_ckpt <= self.frames:
                self._next_ckpt += int(lc["checkpoint_every_updates"])
            self._periodic_checkpoint()

    _last_time = 0.0

    # ------------------------------------------------------------------ checkpoints
    def _counters(self) -> dict[str, Any]:
        out = {**super()._counters(), "env_frames": self.env_frames, "owed": self._owed}
        if self.target is not None:
            out["target"] = self.target.state_dict()
        return out

    def _read_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        values = super()._read_counters(counters)
        values["env_frames"] = int(counters.get("env_frames", 0))
        values["owed"] = float(counters.get("owed", 0.0))
        values["target"] = counters.get("target")
        return values

    def _apply_counters(self, values: dict[str, Any]) -> None:
        super()._apply_counters(values)
        self.env_frames, self._owed = values["env_frames"], values["owed"]
        self._steps = self.frames
        if self.target is not None and values["target"] is not None:
            self.target.load_state_dict(values["target"])
        self._last_time = self.elapsed


def _observation_norm(
    config: dict[str, Any], dataset: Any, online_frames: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(loc, scale)`` of ``data.normalize_observations`` (None: off). The statistics are
    computed once from the dataset and kept in ``config["data"]`` (so in ``config.json``)."""
    dc = config.get("data") or {}
    if not dc.get("normalize_observations"):
        return None
    if online_frames:
        raise ValueError(
            f"tdrl train {config['algorithm']}: data.normalize_observations does not combine "
            f"with online fine-tuning (got online_frames={online_frames}; expected 0: the "
            "collector feeds the policy raw observations). Drop one of them."
        )
    if not dc.get("observation_loc"):
        dc["observation_loc"], dc["observation_scale"] = observation_stats(dataset)
    loc, scale = dc["observation_loc"], dc["observation_scale"]
    return torch.tensor(loc, dtype=torch.float32), torch.tensor(scale, dtype=torch.float32)
