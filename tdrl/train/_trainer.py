"""Trainer base: run directory, seeding, logging, evaluation, checkpoints and resume."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tdrl.envs import EnvBase
from tdrl.train._builders import make_env
from tdrl.train._checkpoint import (
    CheckpointWriteError,
    load_latest,
    report_to_stderr,
    save_checkpoint,
)
from tdrl.train._compile import compile_settings, policy_compile
from tdrl.train._eval import EpisodeTracker, evaluate
from tdrl.train._lock import RunLock
from tdrl.train._logging import (
    EvalVideo,
    RunLogger,
    now,
    plot_learning_curve,
    truncate_metrics,
    write_summary,
)
from tdrl.train._resume import ResumingCollector, RunState

__all__ = ["Trainer"]


class Trainer:
    """Shared machinery of the on- and off-policy trainers.

    Subclasses build ``self.env``, ``self.policy`` (what evaluation runs), ``self.modules``
    and ``self.optimizers`` (what checkpoints hold), then write ``_train()``, which calls
    ``_after_iteration`` once per collected batch.

    Args:
        config: the run config (a preset merged with overrides).
        out_dir: the run directory (created).
        quiet: no progress bar.
        tensorboard: also log to TensorBoard (same as ``logger="tensorboard"``).
        logger: also log through a :mod:`tdrl.record` logger in the run directory:
            ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"`` (``tdrl train --logger``).
        video: film one evaluation episode per evaluation through the logger (``tdrl train
            --video``; the csv logger when none is given).
        resume: continue from the newest complete checkpoint of ``out_dir``.
        ray: collect with Ray actors (a ``RaySettings``; ``tdrl train --ray``).
        stop: a :class:`~tdrl.train._stop.GracefulStop` whose signals end the run after the
            current iteration, with a checkpoint (``tdrl train`` passes one).

    A run holds a :class:`~tdrl.train._lock.RunLock` on ``out_dir`` while it trains: a second
    process training in the same directory is refused. A periodic checkpoint that cannot be
    written (no space, a read-only folder) is reported on stderr and retried at the next
    interval with ``logging.checkpoint_on_error = "warn"`` (the default), or stops the run with
    ``"stop"``; the checkpoint at the end of a run, or of a stop, always raises.
    """

    def __init__(
        self,
        config: dict[str, Any],
        out_dir: str | Path,
        *,
        quiet: bool = False,
        tensorboard: bool = False,
        logger: str | None = None,
        video: bool = False,
        resume: bool = False,
        ray: Any = None,
        stop: Any = None,
    ) -> None:
        if compile_settings(config) is not None and not self.compiles:
            raise ValueError(
                f"tdrl train --compile: {type(self).__name__} does not compile its update (got "
                f"algorithm {config['algorithm']!r}; expected a preset whose trainer compiles it: "
                "the online presets do, the offline ones (iql, cql, td3bc, bc, dt) do not). "
                "Drop --compile."
            )
        self.config = config
        self.ray = ray
        self.stop = stop
        self.on_error = _on_error(config)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.quiet = quiet
        self.tensorboard = tensorboard or bool(config.get("logging", {}).get("tensorboard"))
        self.logger_type = logger or config.get("logging", {}).get("logger")
        self.eval_video = EvalVideo.from_config(config) if video else None
        self.resume = resume
        seed = int(config.get("seed", 0))
        # Small networks on a few cores: intra-op threads fight each other (DESIGN.md section 3).
        torch.set_num_threads(int(config.get("threads", 1)))
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        self.frames = 0
        self.iteration = 0
        self.elapsed = 0.0
        self.best_eval = -float("inf")
        self.last_eval: float | None = None
        self.solved_at: int | None = None
        self.modules: dict[str, nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.buffer: Any = None
        num_envs = int(config["num_envs"])
        if ray is not None:  # the env of one collector actor: the policy is built for it
            num_envs = ray.envs_per_collector(config)
        device, options = config.get("device", "cpu"), config.get("env_options")
        processes = self._env_processes = int(config.get("env_processes", 0) or 0)
        if ray is not None and processes:
            raise ValueError(
                f"tdrl train --ray: env_processes must be 0 with Ray actors (got "
                f"env_processes={processes}; expected 0: the actors already step the envs in "
                "processes of their own). Use --num-collectors instead."
            )
        self.env: EnvBase = make_env(
            config["env"], num_envs, seed=seed, device=device, options=options, processes=processes
        )
        eval_cfg = config.get("eval", {})
        self.eval_env = make_env(
            config["env"],
            int(eval_cfg.get("episodes", 10)),
            seed=seed + 10_000,
            device=device,
            options=options,
        )
        self.tracker = EpisodeTracker(self.env.reward_keys[0], self.env.done_groups[0].done)
        self._recent: list[float] = []
        self._next_eval = int(eval_cfg.get("every_frames", 0) or 0)
        self._next_ckpt = int(config.get("logging", {}).get("checkpoint_every_frames", 0) or 0)
        self._saved_frames: int | None = None  # the frames of the newest checkpoint written/read
        self._resume_state: Any = None  # (env state, next root) for the first collector
        self._live_collector: Any = None

    # ------------------------------------------------------------------ hooks
    policy: Any
    compiles = False  # whether the subclass compiles its update step with --compile
    # the metrics.csv column that counts progress (checkpoints, budget, the curve's x axis):
    # env frames here, gradient updates for the offline trainer
    progress_key = "frames"

    def _budget(self) -> int:
        """The progress budget (``self.frames`` stops there)."""
        return int(self.config["frames"])

    def _train(self) -> None:
        raise NotImplementedError

    def _collector(self, policy: Any, frames_per_batch: int, init_random_frames: int = 0) -> Any:
        """A :class:`Collector` on ``self.env``, or Ray actors with ``ray`` (both give
        ``rollout()`` and ``shutdown()``)."""
        if self.ray is None:
            resume, self._resume_state = self._resume_state, None
            self._live_collector = ResumingCollector(
                self.env,
                policy,
                frames_per_batch=frames_per_batch,
                init_random_frames=init_random_frames,
                compile_policy=policy_compile(self.config),
                resume=resume,
            )
            return self._live_collector
        from tdrl.train._ray_collect import ray_rollouts

        rollouts = ray_rollouts(
            self.ray,
            self.config,
            policy,
            frames_per_batch=frames_per_batch,
            init_random_frames=init_random_frames,
        )
        if self.stop is not None:  # ray.init replaces the SIGTERM handler with its own
            self.stop.install()
        return rollouts

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        """Trains until the frame budget, the target return or a stop signal; returns the
        summary (with ``"stopped"``: the signal's name, after a stop).

        Raises:
            RunLockedError: another process trains in ``out_dir``.
        """
        with RunLock(self.out_dir, where="tdrl train"):
            try:
                return self._run()
            finally:
                if self._env_processes:  # the worker processes this trainer started
                    self.env.close()

    def _run(self) -> dict[str, Any]:
        (self.out_dir / "config.json").write_text(json.dumps(self.config, indent=2))
        if self.resume:
            self._restore()
        else:
            truncate_metrics(self.out_dir / "metrics.csv", -1, column=self.progress_key)
        self.logger = RunLogger(
            self.out_dir,
            self._budget(),
            quiet=self.quiet,
            tensorboard=self.tensorboard,
            start_frames=self.frames,
            step_key=self.progress_key,
            backend=self.logger_type,
            video=self.eval_video,
            policy=self.policy,
            config=self.config,
        )
        self._t0 = now() - self.elapsed
        try:
            self._train()
        finally:
            self.logger.close()
        self.elapsed = now() - self._t0
        if self._saved_frames != self.frames:
            self._checkpoint()
        if self.stopped:
            return {**self.summary(), "stopped": self.stopped}
        if self.last_eval is None:
            self._evaluate()
        summary = self.summary()
        write_summary(self.out_dir, summary)
        plot_learning_curve(self.out_dir, x=self.progress_key)
        return summary

    def summary(self) -> dict[str, Any]:
        """The numbers written to ``summary.json``."""
        return {
            "algorithm": self.config["algorithm"],
            "env": self.config["env"],
            "frames": self.frames,
            "iterations": self.iteration,
            "train_seconds": round(self.elapsed, 3),
            "final_eval_return": self.last_eval,
            "best_eval_return": self.best_eval if self.best_eval > -float("inf") else None,
            "solved_at_frames": self.solved_at,
            "recent_train_return": _mean(self._recent[-20:]),
        }

    @property
    def stopped(self) -> str | None:
        """The signal that asked the run to stop (``"SIGTERM"``, ``"SIGINT"``), or None."""
        return self.stop.requested if self.stop is not None else None

    @property
    def done(self) -> bool:
        """Whether training should stop (budget reached, target return hit or a stop signal)."""
        return (
            self.frames >= self._budget() or self.solved_at is not None or self.stopped is not None
        )

    def episode_returns(self, env: EnvBase) -> list[float]:
        """The deterministic policy's return of one episode per member of ``env`` (the
        evaluation of training and of ``tdrl eval``)."""
        max_steps = int(self.config.get("eval", {}).get("max_steps", 10_000))
        return evaluate(env, self.policy, max_steps=max_steps)

    def _evaluate(self) -> float:
        return self._record_eval(self.episode_returns(self.eval_env))

    def _record_eval(self, returns: list[float]) -> float:
        """Records an evaluation (last, best, solved); returns its mean."""
        self.last_eval = _mean(returns)
        assert self.last_eval is not None
        self.best_eval = max(self.best_eval, self.last_eval)
        target = float(self.config.get("eval", {}).get("target_return", 0) or 0)
        if target and self.last_eval >= target and self.solved_at is None:
            self.solved_at = self.frames
        return self.last_eval

    def _after_iteration(self, batch: Any, losses: dict[str, float], frames: int) -> None:
        """Bookkeeping after one collected batch and its updates: metrics, eval, checkpoints."""
        self.frames += frames
        self.iteration += 1
        returns = self._train_columns(batch) if batch is not None else {}
        elapsed = now() - self._t0
        row: dict[str, Any] = {
            "iteration": self.iteration,
            "frames": self.frames,
            "time": round(elapsed, 3),
            "fps": self.frames / max(elapsed, 1e-9),
            **losses,
            **returns,
        }
        if self._next_eval and self.frames >= self._next_eval:
            row.update(self._eval_columns())
            while self._next_eval <= self.frames:
                self._next_eval += int(self.config["eval"]["every_frames"])
        self.logger.log(row)
        if self._next_ckpt and self.frames >= self._next_ckpt:
            self.elapsed = elapsed
            while self._next_ckpt <= self.frames:  # the next interval, also after a failure
                self._next_ckpt += int(self.config["logging"]["checkpoint_every_frames"])
            self._periodic_checkpoint()

    def _train_columns(self, batch: Any) -> dict[str, float]:
        """The training-return columns of a batch's row (none while no episode finished)."""
        finished = self.tracker.update(batch)
        self._recent.extend(finished)
        self._recent = self._recent[-100:]
        if not finished:
            return {}
        last = self._recent[-20:]
        return {"train_return": sum(last) / len(last)}

    def _episode_trackers(self) -> dict[str, EpisodeTracker]:
        """The trackers whose unfinished episodes' returns checkpoints keep, by name."""
        return {"running": self.tracker}

    def _eval_columns(self) -> dict[str, float]:
        """The evaluation columns of a row (one evaluation)."""
        return {"eval_return": self._evaluate()}

    # ------------------------------------------------------------------ checkpoints
    def _counters(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "elapsed": self.elapsed,
            "best_eval": self.best_eval if self.best_eval > -float("inf") else None,
            "last_eval": self.last_eval,
            "solved_at": self.solved_at,
            "next_eval": self._next_eval,
            "next_ckpt": self._next_ckpt,
            "recent": self._recent[-100:],
        }

    def _checkpoint(self) -> None:
        save_checkpoint(
            self.out_dir,
            frames=self.frames,
            modules=self.modules,
            optimizers=self.optimizers,
            counters=self._counters(),
            buffer=self.buffer,
            state=self._state_tensors(),
        )
        self._saved_frames = self.frames

    def _periodic_checkpoint(self) -> None:
        """A checkpoint at an interval: a failed write warns and is retried at the next one
        (``logging.checkpoint_on_error = "warn"``) or raises (``"stop"``)."""
        try:
            self._checkpoint()
        except CheckpointWriteError as err:
            if self.on_error == "stop":
                raise
            report_to_stderr(
                f"tdrl train: warning: checkpoint at frame {self.frames} failed, training goes "
                f"on and retries at frame {self._next_ckpt} (logging.checkpoint_on_error="
                f'"stop" stops instead): {err}'
            )
            return
        try:  # the learning curve drawn so far: a full disk is handled as for the checkpoint
            plot_learning_curve(self.out_dir, x=self.progress_key)
        except OSError as err:
            if self.on_error == "stop":
                raise
            report_to_stderr(
                f"tdrl train: warning: could not draw {self.out_dir / 'learning_curve.png'} at "
                f"frame {self.frames} ({type(err).__name__}: {err}); training goes on"
            )

    def _state_tensors(self) -> dict[str, Any]:
        """What ``--resume`` needs to continue exactly (see ``_resume.RunState``)."""
        root = getattr(self._live_collector, "next_root", None)
        return self._run_state().tensors(root)

    def _run_state(self) -> RunState:
        return RunState(self.env, self.eval_env, self._episode_trackers())

    def _restore(self) -> dict[str, Any]:
        """Loads the newest checkpoint that verifies (older ones when newer ones fail, each
        skip reported on stderr); returns its counters (subclasses read their own)."""
        path, counters = load_latest(
            self.out_dir,
            where="tdrl train --resume",
            report=report_to_stderr,
            modules=self.modules,
            optimizers=self.optimizers,
            buffer=self.buffer,
            restore_rng=True,
            check=self._read_counters,
        )
        self._apply_counters(self._read_counters(counters))
        self._saved_frames = self.frames
        report_to_stderr(f"tdrl train --resume: resuming from {path} at frame {self.frames}")
        truncate_metrics(self.out_dir / "metrics.csv", self.frames, column=self.progress_key)
        return counters

    def _read_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        """Parses a checkpoint's counters; raises on malformed ones and changes nothing."""
        best = counters.get("best_eval")
        last, solved = counters.get("last_eval"), counters.get("solved_at")
        return {
            "frames": int(counters["frames"]),
            "iteration": int(counters["iteration"]),
            "elapsed": float(counters["elapsed"]),
            "best_eval": float(best) if best is not None else -float("inf"),
            "last_eval": float(last) if last is not None else None,
            "solved_at": int(solved) if solved is not None else None,
            "next_eval": int(counters["next_eval"]),
            "next_ckpt": int(counters["next_ckpt"]),
            "recent": [float(r) for r in counters.get("recent", [])],
            "state": self._run_state().check(counters.get("state", {})),
        }

    def _apply_counters(self, values: dict[str, Any]) -> None:
        self.frames, self.iteration, self.elapsed = (
            values["frames"],
            values["iteration"],
            values["elapsed"],
        )
        self.best_eval, self.last_eval = values["best_eval"], values["last_eval"]
        self.solved_at = values["solved_at"]
        self._next_eval, self._next_ckpt = values["next_eval"], values["next_ckpt"]
        self._recent = values["recent"]
        # the training env's state waits for the collector, which puts it back after its reset
        self._resume_state = self._run_state().apply(values["state"])


def _on_error(config: dict[str, Any]) -> str:
    value = config.get("logging", {}).get("checkpoint_on_error", "warn")
    if value not in ("warn", "stop"):
        raise ValueError(
            f"tdrl train: unknown logging.checkpoint_on_error (got {value!r}; expected 'warn' or "
            "'stop'). 'warn' reports a failed periodic checkpoint and retries at the next "
            "interval; 'stop' ends the run with the error."
        )
    return str(value)


def _mean(values: list[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None
