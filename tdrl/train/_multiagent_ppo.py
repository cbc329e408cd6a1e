"""MAPPO and IPPO: one clipped-PPO loss per agent group on its nested keys, summed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn

from tdrl.train._compile import compile_loss
from tdrl.train._multiagent import MultiAgentTrainer
from tdrl.train._multiagent_models import make_ppo_loss
from tdrl.train._on_policy import PPOLoop

__all__ = ["MultiAgentPPOTrainer"]


class MultiAgentPPOTrainer(MultiAgentTrainer, PPOLoop):
    """Multi-agent PPO: ``mappo`` (centralised critic) or ``ippo`` (decentralised critics).

    For each agent group: a policy network shared by the group's agents (a
    ``MultiAgentMLP`` with ``share_params``) acting on each agent's own observation, and a
    critic giving each agent a value: with ``mappo`` it reads the observations of every agent
    of the group (``MultiAgentMLP(centralized=True)``), with ``ippo`` each agent's own. Each
    group has a ``ClipPPOLoss`` whose keys (action, log-probability, value, advantage, reward,
    done) are the group's nested entries; GAE runs per agent. A group without its own done
    entries uses the root ``done``/``terminated`` (VMAS); a group with its own (PettingZoo,
    the built-in Navigation) also ends its trajectories at a root ``done``, when the env resets
    every agent. The losses of the groups are summed and trained by one Adam optimizer in the
    loop of the single-agent PPO (:class:`~tdrl.train._on_policy.PPOLoop`).

    Examples:
        >>> import tempfile
        >>> from tdrl.train import load_config
        >>> cfg = load_config("mappo", overrides=["env='Navigation'", "num_envs=4",
        ...     "frames=256", "collector.frames_per_batch=128", "eval.every_frames=0"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     summary = MultiAgentPPOTrainer(cfg, d, quiet=True).run()
        >>> summary["frames"], summary["groups"]
        (256, {'agents': 3})
    """

    compiles = True

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        centralized = config["algorithm"] == "mappo"
        self.group_losses = {
            g.name: make_ppo_loss(g, config, centralized=centralized) for g in self.groups
        }
        self.losses = nn.ModuleDict(self.group_losses)
        for loss in self.group_losses.values():
            compile_loss(loss, config)
        actors = [x.actor_network for x in self.group_losses.values()]
        # one group: the actor itself (a sequence around it costs ~10% of a rollout)
        self.policy = actors[0] if len(actors) == 1 else TensorDictSequential(*actors)
        oc = config["optim"]
        self.lr = float(oc["lr"])
        self.optimizer = torch.optim.Adam(
            self.losses.parameters(), lr=self.lr, eps=1e-5, fused=True
        )
        self.modules = {"losses": self.losses}
        self.optimizers = {"optim": self.optimizer}

    def _advantages(self, batch: TensorDictBase) -> TensorDictBase:
        """A shallow copy of ``batch`` with each group's advantage and value target."""
        data = batch.copy()  # new entries go to the copy, never into the collector's memory
        root_done = data.get(("next", "done"))
        for g in self.groups:
            if g.own_done:  # a root done resets every agent: their trajectories end there
                done = data.get(("next", *g.key("done")))
                data.set(("next", *g.key("done")), done | root_done.unsqueeze(-2))
        with torch.no_grad():
            for loss in self.group_losses.values():
                loss.value_estimator(data)
        return data

    def _terms(self, sample: TensorDictBase) -> dict[str, torch.Tensor]:
        """The groups' loss terms added up (diagnostics averaged), and with several groups
        each group's own as ``"<term>/<group>"``."""
        terms: dict[str, torch.Tensor] = {}
        several = len(self.groups) > 1
        for name, loss in self.group_losses.items():
            for k, v in loss(sample).items():
                if several:
                    terms[f"{k}/{name}"] = v
                v = v if k.startswith("loss_") else v / len(self.groups)
                terms[k] = terms[k] + v if k in terms else v
        return terms

    def _parameters(self) -> Iterator[nn.Parameter]:
        return self.losses.parameters()
