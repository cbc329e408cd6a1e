"""QMIX: per-group value decomposition with a replay buffer, e-greedy exploration and targets."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from tensordict.utils import NestedKey
from torch import nn

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.objectives import HardUpdate, SoftUpdate
from tdrl.train._compile import compile_loss
from tdrl.train._multiagent import MultiAgentTrainer
from tdrl.train._multiagent_models import TEAM, make_qmix_loss
from tdrl.train._off_policy import ReplayLoop

__all__ = ["QMixTrainer"]


class QMixTrainer(MultiAgentTrainer, ReplayLoop):
    """QMIX (Rashid et al., 2018) for every agent group of a discrete-action env.

    For each group: a Q-network shared by the group's agents (a ``MultiAgentMLP`` with
    ``share_params`` in a greedy ``QValueActor``, reading the group's ``action_mask`` when
    the env has one), e-greedy exploration annealed from ``exploration.eps_init`` to
    ``eps_end`` over ``annealing_frames`` frames, and a ``QMixer`` conditioned on the env's
    root ``"state"`` (PettingZoo with ``env_options.return_state=true``) or, without one, on
    the group's stacked observations. ``QMixerLoss`` learns from the group's team reward,
    ``(team, group, "reward")``: the mean of its agents' rewards (stored with each transition)
    and the root ``done``/``terminated``: the horizon truncates and is bootstrapped. The losses
    of the groups are summed (one optimizer); each group has its own target networks, updated
    softly (``target.tau``) or hard (``target.hard_update_interval`` gradient steps).

    Each iteration collects ``collector.frames_per_batch`` frames into the replay buffer (the
    first ``collector.init_random_frames`` with random actions) and runs
    ``loss.updates_per_frame`` gradient steps per frame on sampled batches.

    Examples:
        >>> import tempfile
        >>> from tdrl.train import load_config
        >>> cfg = load_config("qmix", overrides=["num_envs=4", "frames=256",
        ...     "collector.frames_per_batch=128", "collector.init_random_frames=128",
        ...     "eval.every_frames=0", "env_options.max_steps=16"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     summary = QMixTrainer(cfg, d, quiet=True).run()
        >>> summary["frames"]
        256
    """

    compiles = True

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        state_key, state_shape = self._state()
        built = {g.name: make_qmix_loss(g, config, state_key, state_shape) for g in self.groups}
        self.group_losses = {name: loss for name, (loss, _) in built.items()}
        self.losses = nn.ModuleDict(self.group_losses)
        for loss in self.group_losses.values():
            compile_loss(loss, config)
        self.exploration = nn.ModuleDict({name: greedy for name, (_, greedy) in built.items()})
        qnets = [loss.local_value_network for loss in self.group_losses.values()]
        self.policy = qnets[0] if len(qnets) == 1 else TensorDictSequential(*qnets)
        self.collect_policy = TensorDictSequential(
            *[m for q, e in zip(qnets, self.exploration.values()) for m in (q, e)]
        )
        oc, rc, tc = config["optim"], config["buffer"], config.get("target", {})
        self.optimizer = torch.optim.Adam(self.losses.parameters(), lr=float(oc["lr"]), fused=True)
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(int(rc["capacity"]), device=config.get("device", "cpu")),
            batch_size=int(rc["batch_size"]),
        )
        self.targets: list[HardUpdate | SoftUpdate] = [
            HardUpdate(loss, value_network_update_interval=int(tc["hard_update_interval"]))
            if tc.get("hard_update_interval")
            else SoftUpdate(loss, tau=float(tc.get("tau", 0.005)))
            for loss in self.group_losses.values()
        ]
        self.modules = {"losses": self.losses, "exploration": self.exploration}
        self.optimizers = {"optim": self.optimizer}
        self._updates = 0
        self._owed = 0.0
        self._stored_keys = list(self.env.fake_tensordict().keys(True, True))

    def _state(self) -> tuple[NestedKey | None, Any]:
        """The root ``"state"`` and its shape, or ``(None, None)`` (the mixers then read
        their group's observations)."""
        spec = self.env.full_observation_spec
        if "state" not in spec.keys():
            return None, None
        return "state", tuple(spec["state"].shape[len(self.env.batch_size) :])

    # ------------------------------------------------------------------ training
    def _store(self, batch: TensorDictBase) -> None:
        """Writes the batch's transitions, each with its groups' team rewards."""
        flat = batch.reshape(-1).select(*self._stored_keys)  # random batches lack the policy's
        for g in self.groups:
            reward = flat.get(("next", *g.key("reward")))
            flat.set(("next", TEAM, g.name, "reward"), reward.mean(-2))
        self.buffer.extend(flat)

    def _explore(self, frames: int) -> None:
        for greedy in self.exploration.values():
            greedy.step(frames)  # type: ignore[operator]

    def _update_once(self) -> dict[str, float]:
        sample = self.buffer.sample()
        terms = {name: loss(sample)["loss"] for name, loss in self.group_losses.items()}
        total = sum(terms.values())
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()  # type: ignore[union-attr]
        max_norm = float(self.config["optim"].get("max_grad_norm", 0) or 0)
        if max_norm:
            nn.utils.clip_grad_norm_(self.losses.parameters(), max_norm)
        self.optimizer.step()
        for target in self.targets:
            target.step()
        self._updates += 1
        out = {"loss": float(total.detach())}  # type: ignore[union-attr]
        if len(terms) > 1:
            out.update({f"loss/{name}": float(v.detach()) for name, v in terms.items()})
        return out
