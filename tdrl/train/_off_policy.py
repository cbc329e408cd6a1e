"""Off-policy training (DQN, SAC, TD3, DDPG): collect, store, sample, update, soften targets."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.errors import CheckpointError
from tdrl.objectives import HardUpdate, SoftUpdate
from tdrl.train._compile import compile_loss
from tdrl.train._off_policy_agents import make_agent
from tdrl.train._trainer import Trainer

__all__ = ["OffPolicyTrainer", "ReplayLoop"]


class ReplayLoop(Trainer):
    """The loop of the off-policy trainers: collect a batch with ``collect_policy``, store it,
    step the exploration, then, once ``collector.init_random_frames`` are collected, run
    ``loss.updates_per_frame`` updates per collected frame (the fractional rest is owed to the
    next batch; the update and owed counts travel in checkpoints).

    Subclasses set ``collect_policy``, ``_updates = 0`` and ``_owed = 0.0`` and give the hooks
    :meth:`_store`, :meth:`_explore` and :meth:`_update_once`.
    """

    collect_policy: Any
    _updates: int
    _owed: float

    def _store(self, batch: TensorDictBase) -> None:
        """Writes a collected batch to the replay buffer."""
        raise NotImplementedError

    def _explore(self, frames: int) -> None:
        """Advances the exploration schedule by ``frames`` collected frames."""
        raise NotImplementedError

    def _update_once(self) -> dict[str, float]:
        """One gradient step on a sampled batch; returns its loss terms."""
        raise NotImplementedError

    def _counters(self) -> dict[str, Any]:
        return {**super()._counters(), "updates": self._updates, "owed": self._owed}

    def _read_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        updates, owed = int(counters.get("updates", 0)), float(counters.get("owed", 0.0))
        return {**super()._read_counters(counters), "updates": updates, "owed": owed}

    def _apply_counters(self, values: dict[str, Any]) -> None:
        super()._apply_counters(values)
        self._updates, self._owed = values["updates"], values["owed"]

    def _train(self) -> None:
        cc = self.config["collector"]
        fpb = int(cc["frames_per_batch"])
        start = int(cc.get("init_random_frames", 0))
        collector = self._collector(
            self.collect_policy, fpb, init_random_frames=max(start - self.frames, 0)
        )
        ratio = float(self.config["loss"].get("updates_per_frame", 1.0))
        try:
            while not self.done:
                # rollout() returns the collector's memory: _store copies it out right away
                batch = collector.rollout()
                self._store(batch)
                self._explore(fpb)
                losses: dict[str, float] = {}
                if self.frames + fpb >= start:
                    self._owed += ratio * fpb
                    n = int(self._owed)
                    self._owed -= n
                    sums: dict[str, float] = {}
                    for _ in range(n):
                        for k, v in self._update_once().items():
                            sums[k] = sums.get(k, 0.0) + v
                    losses = {k: v / max(n, 1) for k, v in sums.items()}
                self._after_iteration(batch, losses, fpb)
        finally:
            collector.shutdown()


class OffPolicyTrainer(ReplayLoop):
    """Replay-buffer training with a fixed update-to-data ratio.

    Each iteration collects ``collector.frames_per_batch`` frames, writes them to the buffer
    and, once ``collector.init_random_frames`` are stored, runs
    ``round(updates_per_frame * frames)`` gradient steps on sampled batches; targets follow with
    a soft (``target.tau``) or hard (``target.hard_update_interval``) update after each step.

    Examples:
        >>> import tempfile
        >>> from tdrl.train import load_config
        >>> cfg = load_config("dqn", overrides=["frames=256", "collector.init_random_frames=64",
        ...                                     "eval.every_frames=0"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     summary = OffPolicyTrainer(cfg, d, quiet=True).run()
        >>> summary["frames"]
        256
    """

    compiles = True

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        self.agent = make_agent(config["algorithm"], self.env, config)
        self.policy = self.agent.policy
        self.collect_policy = self.agent.collect_policy
        oc, rc, tc = config["optim"], config["buffer"], config.get("target", {})
        self.optimizer = torch.optim.Adam(
            self.agent.loss.parameters(), lr=float(oc["lr"]), fused=True
        )
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(int(rc["capacity"]), device=config.get("device", "cpu")),
            batch_size=int(rc["batch_size"]),
        )
        self.target: HardUpdate | SoftUpdate
        if tc.get("hard_update_interval"):
            self.target = HardUpdate(
                self.agent.loss, value_network_update_interval=int(tc["hard_update_interval"])
            )
        else:
            self.target = SoftUpdate(self.agent.loss, tau=float(tc.get("tau", 0.005)))
        self.modules = {"loss": self.agent.loss}
        self.optimizers = {"optim": self.optimizer}
        self._updates = 0
        self._owed = 0.0
        self._stored_keys = list(self.env.fake_tensordict().keys(True, True))
        compile_loss(self.agent.loss, config)

    def _counters(self) -> dict[str, Any]:
        out = super()._counters()
        out["target"] = self.target.state_dict()  # HardUpdate's step count since its last copy
        if self.agent.exploration is not None:  # e.g. DQN's annealed eps: resume keeps it
            state = self.agent.exploration.state_dict()
            out["exploration"] = {k: v.tolist() for k, v in state.items()}
        return out

    def _read_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        values = super()._read_counters(counters)
        values["exploration"] = self._read_exploration(counters.get("exploration"))
        target = counters.get("target")  # absent from checkpoints written before it was saved
        if target is not None:
            if not isinstance(target, dict) or not all(
                isinstance(v, (bool, int)) for v in target.values()
            ):
                raise ValueError(f"the target updater state is malformed (got {target!r:.60})")
            values["target"] = target
        return values

    def _read_exploration(self, saved: Any) -> dict[str, torch.Tensor] | None:
        """The exploration module's state from the counters (None: checkpoints written before
        it was saved; the exploration then starts afresh, as it did)."""
        if saved is None or self.agent.exploration is None:
            return None
        current = self.agent.exploration.state_dict()
        if not isinstance(saved, dict) or sorted(saved) != sorted(current):
            raise CheckpointError(  # a mismatch with the config, not a corrupted file
                f"load_checkpoint: the exploration state does not fit the preset's exploration "
                f"(got {saved!r:.80}; expected the entries {sorted(current)}). Resume with the "
                "run's own config."
            )
        out = {}
        for key, ref in current.items():
            value = torch.as_tensor(saved[key], dtype=ref.dtype)
            if value.shape != ref.shape or not bool(torch.isfinite(value.float()).all()):
                raise ValueError(
                    f"the exploration entry {key!r} is malformed (got {saved[key]!r:.60}; "
                    f"expected finite values of shape {tuple(ref.shape)})"
                )
            out[key] = value
        return out

    def _apply_counters(self, values: dict[str, Any]) -> None:
        super()._apply_counters(values)
        if values.get("target") is not None:
            self.target.load_state_dict(values["target"])
        if values.get("exploration") is not None:
            self.agent.exploration.load_state_dict(values["exploration"])

    def _update_once(self) -> dict[str, float]:
        out = gradient_step(
            self.agent,
            self.optimizer,
            self.target,
            self.config,
            self.buffer.sample(),
            self._updates,
        )
        self._updates += 1
        return out

    def _store(self, batch: TensorDictBase) -> None:
        # Only the env's entries: random-action batches lack the policy's outputs.
        self.buffer.extend(batch.reshape(-1).select(*self._stored_keys))

    def _explore(self, frames: int) -> None:
        if self.agent.exploration is not None:
            self.agent.exploration.step(frames)


def gradient_step(
    agent: Any,
    optimizer: torch.optim.Optimizer,
    target: Any,
    config: dict[str, Any],
    batch: Any,
    step: int,
) -> dict[str, float]:
    """One update of ``agent.loss`` on ``batch``: the sum of its loss terms (the actor's left
    out except every ``loss.policy_delay``-th ``step``), backward, optional gradient clipping
    (``optim.max_grad_norm``), the optimiser step and the target update (``target`` may be
    None). Returns the loss terms as floats."""
    out = agent.loss(batch)
    delay = int(config["loss"].get("policy_delay", 1) or 1)
    skip = agent.actor_loss_keys if step % delay else ()
    total = sum(v for k, v in out.items() if _is_loss(k) and k not in skip)
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    max_norm = float(config["optim"].get("max_grad_norm", 0) or 0)
    if max_norm:
        torch.nn.utils.clip_grad_norm_(agent.loss.parameters(), max_norm)
    optimizer.step()
    if target is not None:
        target.step()
    return {k: float(v.detach()) for k, v in out.items() if _is_loss(k)}


def _is_loss(key: str) -> bool:
    """A loss term of a loss output: ``"loss"`` (TorchRL's DQN) or ``"loss_*"``."""
    return key == "loss" or key.startswith("loss_")
