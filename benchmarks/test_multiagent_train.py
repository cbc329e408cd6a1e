"""Multi-agent training path: a MAPPO update and a collector rollout beside plain PyTorch.

Both groups run on the built-in :class:`~tdrl.envs.MultiAgentNavigationEnv` (16 worlds of 3
agents, 64 steps per batch: 1024 frames, 3072 agent-steps), so the ratios are visible in one
run::

    .venv/bin/python -m pytest benchmarks/test_multiagent_train.py --benchmark-enable \\
        -p no:cacheprovider

- ``mappo_update``: one update of the ``mappo`` preset's trainer on a collected batch (its
  ``_update`` with one epoch of one minibatch): the centralised critic on the observations
  and next observations, GAE per agent on the nested keys (agent done or root done), the
  clipped PPO objective with the tanh-normal log-probability of the stored actions, the critic
  loss, backward and an Adam step. ``plain``: the same maths hand-written on plain
  ``nn.Sequential`` copies of the same weights (a reversed GAE loop over time, the tanh-normal
  density written out), checked equal to tdrl's by ``test_plain_mappo_matches_the_trainer``.
- ``ma_rollout``: one batch from a :class:`~tdrl.collectors.Collector` running the preset's
  shared tanh-normal policy; ``plain``: the navigation dynamics, the same policy and per-agent
  resets written as one torch loop storing the same entries in preallocated tensors.

Rounds are timed in process CPU time (``time.process_time``), which other processes on
shared cores do not inflate.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tdrl.collectors import Collector
from tdrl.train import load_config
from tdrl.train._multiagent_ppo import MultiAgentPPOTrainer

# TorchRL's biased softplus scale (NormalParamExtractor's default): softplus(raw +
# _SHIFT) + 0.01, which is 1 at raw = 0
_SHIFT = math.log(math.expm1(0.99))

torch.set_num_threads(1)

pytestmark = pytest.mark.benchmark(
    timer=time.process_time, max_time=1.0, min_rounds=5, warmup=True, warmup_iterations=2
)

ENVS, STEPS, AGENTS, OBS, ACT = 16, 64, 3, 4, 2
GAMMA, LMBDA, EPS, LR = 0.99, 0.9, 0.2, 3e-4


def _trainer(tmp_path_factory) -> MultiAgentPPOTrainer:
    cfg = load_config(
        "mappo",
        overrides=[
            "env='Navigation'",
            f"num_envs={ENVS}",
            f"collector.frames_per_batch={ENVS * STEPS}",
            "loss.epochs=1",
            f"loss.minibatch_size={ENVS * STEPS}",
            f"optim.lr={LR}",
            "optim.max_grad_norm=0",
            "env_options.max_steps=50",
            "eval.episodes=1",
        ],
    )
    return MultiAgentPPOTrainer(cfg, tmp_path_factory.mktemp("mappo"), quiet=True)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.manual_seed(0)
    trainer = _trainer(tmp_path_factory)
    collector = Collector(trainer.env, trainer.policy, frames_per_batch=ENVS * STEPS)
    batch = collector.rollout().clone()
    collector.shutdown()
    return trainer, batch


# ----------------------------------------------------------------- plain MAPPO (no tdrl)
def _linears(module: nn.Module) -> nn.Sequential:
    """A plain Tanh ``nn.Sequential`` with copies of a shared MultiAgentMLP's weights."""
    state = module.state_dict()
    names = sorted({k.rsplit(".", 1)[0] for k in state}, key=lambda n: int(n.split(".")[-1]))
    layers: list[nn.Module] = []
    for i, name in enumerate(names):
        w, b = state[f"{name}.weight"], state[f"{name}.bias"]
        linear = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            linear.weight.copy_(w)
            linear.bias.copy_(b)
        layers += [linear, nn.Tanh()] if i < len(names) - 1 else [linear]
    return nn.Sequential(*layers)


class PlainMAPPO:
    """Hand-written MAPPO update on a shared actor and a centralised critic."""

    def __init__(self, trainer: MultiAgentPPOTrainer) -> None:
        loss = trainer.group_losses["agents"]
        self.actor = _linears(loss.actor_network.module[0].module[0])
        self.critic = _linears(loss.critic_network.module)
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optim = torch.optim.Adam(params, lr=LR, eps=1e-5)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``[*B, AGENTS, OBS]`` -> one value per agent ``[*B, AGENTS, 1]`` (shared output)."""
        return self.critic(obs.flatten(-2)).unsqueeze(-2).expand(*obs.shape[:-1], 1)

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        loc, raw = self.actor(obs).chunk(2, -1)
        scale = (F.softplus(raw + _SHIFT) + 0.01).clamp_min(1e-4)
        eps = torch.finfo(action.dtype).eps
        x = torch.atanh(action.clamp(-1 + eps, 1 - eps))
        normal = -0.5 * ((x - loc) / scale) ** 2 - scale.log() - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
        return (normal - log_det).sum(-1)

    def losses(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        obs, nobs = batch["agents", "observation"], batch["next", "agents", "observation"]
        reward = batch["next", "agents", "reward"]
        root = batch["next", "done"].unsqueeze(-2)
        done = (batch["next", "agents", "done"] | root).float()
        term = batch["next", "agents", "terminated"].float()
        with torch.no_grad():
            value, next_value = self.value(obs), self.value(nobs)
            delta = reward + GAMMA * (1 - term) * next_value - value
            adv = torch.zeros_like(delta)
            running = torch.zeros_like(delta[:, 0])
            for t in reversed(range(delta.shape[1])):
                running = delta[:, t] + GAMMA * LMBDA * (1 - done[:, t]) * running
                adv[:, t] = running
            target = adv + value
            adv = (adv - adv.mean()) / adv.std().clamp_min(1e-6)
        lp = self.log_prob(obs, batch["agents", "action"])
        ratio = (lp - batch["agents", "action_log_prob"]).exp().unsqueeze(-1)
        gain = torch.minimum(ratio * adv, ratio.clamp(1 - EPS, 1 + EPS) * adv)
        critic = 0.5 * (self.value(obs) - target).square().mean()
        return -gain.mean(), critic

    def update(self, batch) -> None:
        objective, critic = self.losses(batch)
        self.optim.zero_grad(set_to_none=True)
        (objective + critic).backward()
        self.optim.step()


def test_plain_mappo_matches_the_trainer(setup):
    trainer, batch = setup
    plain = PlainMAPPO(trainer)
    objective, critic = plain.losses(batch)
    out = trainer.group_losses["agents"](trainer._advantages(batch).reshape(-1))
    torch.testing.assert_close(out["loss_objective"], objective, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out["loss_critic"], critic, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("impl", ["tdrl", "plain"])
def test_mappo_update(benchmark, setup, impl):
    benchmark.group = "mappo_update"
    trainer, batch = setup
    if impl == "tdrl":
        benchmark(trainer._update, batch)
    else:
        benchmark(PlainMAPPO(trainer).update, batch)


# ----------------------------------------------------------------- rollouts
class PlainRollout:
    """Navigation dynamics, the shared tanh-normal policy and per-agent resets in one loop."""

    def __init__(self, trainer: MultiAgentPPOTrainer) -> None:
        env = trainer.env
        self.dt, self.radius, self.shaping = env.dt, env.goal_radius, env.shaping
        self.bonus, self.horizon = env.goal_bonus, env.max_steps
        self.actor = PlainMAPPO(trainer).actor
        shape = (ENVS, AGENTS)
        self.pos, self.goal = torch.rand(2, *shape, 2) * 2 - 1
        self.dist = (self.goal - self.pos).norm(dim=-1, keepdim=True)
        self.finished = torch.zeros(*shape, 1, dtype=torch.bool)
        self.steps = torch.zeros(ENVS, 1, dtype=torch.int64)
        n = (ENVS, STEPS, AGENTS)
        self.out = {
            "obs": torch.empty(*n, OBS),
            "next_obs": torch.empty(*n, OBS),
            "action": torch.empty(*n, ACT),
            "log_prob": torch.empty(*n),
            "reward": torch.empty(*n, 1),
            "done": torch.empty(*n, 1, dtype=torch.bool),
            "root_done": torch.empty(ENVS, STEPS, 1, dtype=torch.bool),
        }

    def _obs(self) -> torch.Tensor:
        return torch.cat((self.pos, self.goal - self.pos), -1)

    @torch.no_grad()
    def rollout(self) -> dict[str, torch.Tensor]:
        out = self.out
        for t in range(STEPS):
            obs = self._obs()
            loc, raw = self.actor(obs).chunk(2, -1)
            scale = (F.softplus(raw + _SHIFT) + 0.01).clamp_min(1e-4)
            x = loc + scale * torch.randn_like(loc)
            action = torch.tanh(x)
            normal = -0.5 * ((x - loc) / scale) ** 2 - scale.log() - 0.5 * math.log(2 * math.pi)
            log_det = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
            active = ~self.finished
            moved = (self.pos + self.dt * action).clamp(-1, 1)
            self.pos = torch.where(active, moved, self.pos)
            dist = (self.goal - self.pos).norm(dim=-1, keepdim=True)
            reached = active & (dist < self.radius)
            reward = ((self.dist - dist) * self.shaping + self.bonus * reached) * active
            self.dist, self.finished = dist, self.finished | reached
            self.steps += 1
            root = self.finished.all(-2) | (self.steps >= self.horizon)
            done = self.finished | root.unsqueeze(-2)
            out["obs"][:, t], out["next_obs"][:, t] = obs, self._obs()
            out["action"][:, t], out["log_prob"][:, t] = action, (normal - log_det).sum(-1)
            out["reward"][:, t], out["done"][:, t], out["root_done"][:, t] = reward, done, root
            self._reset(done, root)
        return out

    def _reset(self, done: torch.Tensor, root: torch.Tensor) -> None:
        fresh = torch.rand(2, ENVS, AGENTS, 2) * 2 - 1
        self.pos = torch.where(done, fresh[0], self.pos)
        self.goal = torch.where(done, fresh[1], self.goal)
        self.finished = self.finished & ~done
        self.steps = self.steps.masked_fill(root, 0)
        self.dist = (self.goal - self.pos).norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("impl", ["tdrl", "plain"])
def test_ma_rollout(benchmark, setup, impl):
    benchmark.group = "ma_rollout"
    trainer, _ = setup
    if impl == "plain":
        benchmark(PlainRollout(trainer).rollout)
        return
    collector = Collector(trainer.env, trainer.policy, frames_per_batch=ENVS * STEPS)
    try:
        benchmark(collector.rollout)
    finally:
        collector.shutdown()
