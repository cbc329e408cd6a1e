"""Off-policy loss benchmarks: one training update of each tdrl loss beside plain PyTorch.

Each group (``dqn``, ``ddpg``, ``td3``, ``sac``, ``redq``, ``cql``, ``iql``) times a full update
(loss forward, backward, Adam step) of the tdrl loss (``tdrl``) and of a hand-written plain
PyTorch version of the same update (``plain``), on the same batch, so the ratio is visible in
one run::

    .venv/bin/python -m pytest benchmarks/test_losses_offpolicy.py --benchmark-enable \\
        -p no:cacheprovider

Rounds are timed in process CPU time (``time.process_time``), which other processes on shared
cores do not inflate.

Sizes: continuous losses use observations of 17 dims, actions of 6 dims, ReLU MLPs with two
hidden layers of 256 units and a batch of 256 transitions (a MuJoCo-like setting); DQN uses
CartPole sizes (4 observations, 2 actions, 2 x 64 MLP, batch 256). SAC, TD3, CQL and IQL use 2
critics, REDQ 10 critics with target subsets of 2 (its plain version loops over the critics),
CQL 10 proposals of each kind per state. Target-network updates are not timed.
"""

from __future__ import annotations

import copy
import functools
import math
import operator
import time

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal
from tdrl.objectives import (
    CQLLoss,
    DDPGLoss,
    DQNLoss,
    IQLLoss,
    REDQLoss,
    SACLoss,
    TD3Loss,
)

# TorchRL's biased softplus scale (NormalParamExtractor's default): softplus(raw +
# _SHIFT) + 0.01, which is 1 at raw = 0
_SHIFT = math.log(math.expm1(0.99))

torch.set_num_threads(1)

# CPU time of the process, not wall time: on shared cores a preempted round would otherwise
# count the time other processes ran (with one intra-op thread, backward runs on this thread).
pytestmark = pytest.mark.benchmark(
    timer=time.process_time, max_time=1.0, min_rounds=5, warmup=True, warmup_iterations=2
)

OBS, ACT, HIDDEN, BATCH, GAMMA = 17, 6, 256, 256, 0.99
DQN_OBS, DQN_ACT, DQN_HIDDEN = 4, 2, 64


# ----------------------------------------------------------------- data and networks
def make_batch(obs=OBS, discrete=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    action = (
        torch.randint(DQN_ACT, (BATCH,), generator=g)
        if discrete
        else torch.rand(BATCH, ACT, generator=g) * 1.8 - 0.9
    )
    terminated = torch.rand(BATCH, 1, generator=g) < 0.05
    return TensorDict(
        {
            "observation": torch.randn(BATCH, obs, generator=g),
            "action": action,
            "next": {
                "observation": torch.randn(BATCH, obs, generator=g),
                "reward": torch.randn(BATCH, 1, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        [BATCH],
    )


def mlp(n_in, n_out, hidden=HIDDEN):
    return MLP(n_in, n_out, num_cells=hidden, activation=nn.ReLU)


def tdrl_policy():
    net = nn.Sequential(mlp(OBS, 2 * ACT), NormalParamExtractor())
    module = TensorDictModule(net, ["observation"], ["loc", "scale"])
    return ProbabilisticActor(module, ["loc", "scale"], distribution_class=TanhNormal)


def tdrl_critic():
    return TensorDictModule(mlp(OBS + ACT, 1), ["observation", "action"], ["state_action_value"])


def tdrl_deterministic_actor():
    return TensorDictModule(nn.Sequential(mlp(OBS, ACT), nn.Tanh()), ["observation"], ["action"])


def tdrl_step(loss, batch):
    optim = torch.optim.Adam(loss.parameters(), lr=1e-4)

    terms = [k for k in loss(batch).keys() if k == "loss" or k.startswith("loss_")]

    def step():
        out = loss(batch)
        total = functools.reduce(operator.add, [out[k] for k in terms])
        optim.zero_grad()
        total.backward()
        optim.step()

    return step


def plain_step(modules, losses_fn):
    optim = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=1e-4)

    def step():
        total = losses_fn()
        optim.zero_grad()
        total.backward()
        optim.step()

    return step


def run_tdrl(benchmark, group, loss, batch):
    benchmark.group = group
    STEPS[group, "tdrl"] = step = tdrl_step(loss, batch)
    benchmark(step)


def run_plain(benchmark, group, modules, losses_fn):
    benchmark.group = group
    STEPS[group, "plain"] = step = plain_step(modules, losses_fn)
    benchmark(step)


STEPS: dict = {}  # (group, kind) -> step, kept for interleaved re-measurement by hand


def frozen(modules):
    """Context: the modules' parameters do not require grad (the actor loss of plain code)."""

    class _Frozen:
        def __enter__(self):
            for m in modules:
                m.requires_grad_(False)

        def __exit__(self, *exc):
            for m in modules:
                m.requires_grad_(True)

    return _Frozen()


def clone_frozen(module):
    twin = copy.deepcopy(module)
    twin.requires_grad_(False)
    return twin


def tanh_normal(out):
    """Plain TanhNormal sample on [-1, 1]: (action, log_prob) from the actor's raw output."""
    loc, raw = out.chunk(2, -1)
    scale = (F.softplus(raw + _SHIFT) + 0.01).clamp_min(1e-4)
    x = loc + scale * torch.randn_like(loc)
    log_prob = -0.5 * ((x - loc) / scale).pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
    log_det = 2 * (math.log(2) - x - F.softplus(-2 * x))
    return torch.tanh(x), (log_prob - log_det).sum(-1, keepdim=True)


def tanh_normal_log_prob(out, action):
    loc, raw = out.chunk(2, -1)
    scale = (F.softplus(raw + _SHIFT) + 0.01).clamp_min(1e-4)
    eps = torch.finfo(action.dtype).eps
    x = torch.atanh(action.clamp(-1 + eps, 1 - eps))
    log_prob = -0.5 * ((x - loc) / scale).pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
    log_det = 2 * (math.log(2) - x - F.softplus(-2 * x))
    return (log_prob - log_det).sum(-1, keepdim=True)


def bootstrap(batch, next_value):
    nxt = batch["next"]
    return nxt["reward"] + GAMMA * (~nxt["terminated"]).float() * next_value


# ----------------------------------------------------------------- DQN
def test_dqn_tdrl(benchmark):
    torch.manual_seed(0)
    net = TensorDictModule(mlp(DQN_OBS, DQN_ACT, DQN_HIDDEN), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="categorical").make_value_estimator(gamma=GAMMA)
    run_tdrl(benchmark, "dqn", loss, make_batch(DQN_OBS, discrete=True))


def test_dqn_plain(benchmark):
    torch.manual_seed(0)
    net = mlp(DQN_OBS, DQN_ACT, DQN_HIDDEN)
    target = clone_frozen(net)
    b = make_batch(DQN_OBS, discrete=True)

    def losses():
        q = net(b["observation"]).gather(-1, b["action"].unsqueeze(-1))
        with torch.no_grad():
            y = bootstrap(b, target(b["next", "observation"]).max(-1, keepdim=True).values)
        return 0.5 * (q - y).pow(2).mean()

    run_plain(benchmark, "dqn", [net], losses)


# ----------------------------------------------------------------- DDPG
def test_ddpg_tdrl(benchmark):
    torch.manual_seed(0)
    loss = DDPGLoss(tdrl_deterministic_actor(), tdrl_critic()).make_value_estimator(gamma=GAMMA)
    run_tdrl(benchmark, "ddpg", loss, make_batch())


def test_ddpg_plain(benchmark):
    torch.manual_seed(0)
    actor, critic = nn.Sequential(mlp(OBS, ACT), nn.Tanh()), mlp(OBS + ACT, 1)
    target = clone_frozen(critic)
    b = make_batch()
    obs, nobs = b["observation"], b["next", "observation"]

    def losses():
        q = critic(torch.cat([obs, b["action"]], -1))
        with torch.no_grad():
            y = bootstrap(b, target(torch.cat([nobs, actor(nobs)], -1)))
        with frozen([critic]):
            actor_loss = -critic(torch.cat([obs, actor(obs)], -1)).mean()
        return actor_loss + 0.5 * (q - y).pow(2).mean()

    run_plain(benchmark, "ddpg", [actor, critic], losses)


# ----------------------------------------------------------------- TD3
def test_td3_tdrl(benchmark):
    torch.manual_seed(0)
    loss = TD3Loss(tdrl_deterministic_actor(), tdrl_critic(), bounds=(-1.0, 1.0))
    run_tdrl(benchmark, "td3", loss.make_value_estimator(gamma=GAMMA), make_batch())


def test_td3_plain(benchmark):
    torch.manual_seed(0)
    actor = nn.Sequential(mlp(OBS, ACT), nn.Tanh())
    critics = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
    target_actor, target_critics = clone_frozen(actor), clone_frozen(critics)
    b = make_batch()
    obs, nobs = b["observation"], b["next", "observation"]

    def losses():
        sa = torch.cat([obs, b["action"]], -1)
        with torch.no_grad():
            next_action = target_actor(nobs)
            noise = (torch.randn_like(next_action) * 0.2).clamp(-0.5, 0.5)
            nsa = torch.cat([nobs, (next_action + noise).clamp(-1.0, 1.0)], -1)
            y = bootstrap(b, torch.min(target_critics[0](nsa), target_critics[1](nsa)))
        q_loss = sum(0.5 * (c(sa) - y).pow(2).mean() for c in critics)
        with frozen([critics[0]]):
            actor_loss = -critics[0](torch.cat([obs, actor(obs)], -1)).mean()
        return actor_loss + q_loss

    run_plain(benchmark, "td3", [actor, critics], losses)


# ----------------------------------------------------------------- SAC and REDQ
def test_sac_tdrl(benchmark):
    torch.manual_seed(0)
    loss = SACLoss(tdrl_policy(), tdrl_critic()).make_value_estimator(gamma=GAMMA)
    run_tdrl(benchmark, "sac", loss, make_batch())


def plain_soft_update(n_critics, subset, reduce_actor):
    """SAC (subset=n_critics, min) and REDQ (random subset, mean for the actor) in plain code."""
    actor = mlp(OBS, 2 * ACT)
    critics = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(n_critics)])
    targets = clone_frozen(critics)
    log_alpha = nn.Parameter(torch.zeros(()))
    holder = nn.ParameterList([log_alpha])
    b = make_batch()
    obs, nobs = b["observation"], b["next", "observation"]

    def losses():
        alpha = log_alpha.detach().exp()
        sa = torch.cat([obs, b["action"]], -1)
        with torch.no_grad():
            next_action, next_lp = tanh_normal(actor(nobs))
            nsa = torch.cat([nobs, next_action], -1)
            chosen = torch.randperm(n_critics)[:subset].tolist()
            next_q = torch.stack([targets[i](nsa) for i in chosen]).amin(0)
            y = bootstrap(b, next_q - alpha * next_lp)
        q_loss = sum(0.5 * (c(sa) - y).pow(2).mean() for c in critics)
        action, lp = tanh_normal(actor(obs))
        with frozen(critics):
            q_pi = torch.stack([c(torch.cat([obs, action], -1)) for c in critics])
        actor_loss = (alpha * lp - reduce_actor(q_pi)).mean()
        alpha_loss = -(log_alpha * (lp.detach() - ACT)).mean()
        return actor_loss + q_loss + alpha_loss

    return [actor, critics, holder], losses


def test_sac_plain(benchmark):
    torch.manual_seed(0)
    modules, losses = plain_soft_update(2, 2, lambda q: q.amin(0))
    run_plain(benchmark, "sac", modules, losses)


def test_redq_tdrl(benchmark):
    torch.manual_seed(0)
    loss = REDQLoss(tdrl_policy(), tdrl_critic(), num_qvalue_nets=10, sub_sample_len=2)
    run_tdrl(benchmark, "redq", loss.make_value_estimator(gamma=GAMMA), make_batch())


def test_redq_plain(benchmark):
    torch.manual_seed(0)
    modules, losses = plain_soft_update(10, 2, lambda q: q.mean(0))
    run_plain(benchmark, "redq", modules, losses)


# ----------------------------------------------------------------- CQL
def test_cql_tdrl(benchmark):
    torch.manual_seed(0)
    loss = CQLLoss(tdrl_policy(), tdrl_critic(), num_random=10).make_value_estimator(gamma=GAMMA)
    run_tdrl(benchmark, "cql", loss, make_batch())


def test_cql_plain(benchmark):
    torch.manual_seed(0)
    n = 10
    actor = mlp(OBS, 2 * ACT)
    critics = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
    targets = clone_frozen(critics)
    log_alpha = nn.Parameter(torch.zeros(()))
    holder = nn.ParameterList([log_alpha])
    b = make_batch()
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]
    reps = obs.expand(3 * n + 1, *obs.shape)

    def losses():
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            uniform = torch.rand(n, *action.shape) * 2 - 1
            cur, cur_lp = tanh_normal(actor(obs).expand(n, *obs.shape[:-1], 2 * ACT))
            fol, fol_lp = tanh_normal(actor(nobs).expand(n, *obs.shape[:-1], 2 * ACT))
            next_action, _ = tanh_normal(actor(nobs))
            nsa = torch.cat([nobs, next_action], -1)
            y = bootstrap(b, torch.min(targets[0](nsa), targets[1](nsa)))
            density = torch.cat([torch.full_like(cur_lp, -ACT * math.log(2.0)), cur_lp, fol_lp])
        actions = torch.cat([uniform, cur, fol, action.unsqueeze(0)])
        q_loss, cql = 0.0, 0.0
        for c in critics:
            q = c(torch.cat([reps, actions], -1))
            pred = q[-1]
            q_loss = q_loss + 0.5 * (pred - y).pow(2).mean()
            cql = cql + (torch.logsumexp(q[:-1] - density, 0) - pred).mean()
        new_action, lp = tanh_normal(actor(obs))
        with frozen(critics):
            sa = torch.cat([obs, new_action], -1)
            q_pi = torch.min(critics[0](sa), critics[1](sa))
        actor_loss = (alpha * lp - q_pi).mean()
        alpha_loss = -(log_alpha * (lp.detach() - ACT)).mean()
        return actor_loss + q_loss + cql + alpha_loss

    run_plain(benchmark, "cql", [actor, critics, holder], losses)


# ----------------------------------------------------------------- IQL
def test_iql_tdrl(benchmark):
    torch.manual_seed(0)
    value = TensorDictModule(mlp(OBS, 1), ["observation"], ["state_value"])
    loss = IQLLoss(tdrl_policy(), tdrl_critic(), value_network=value)
    run_tdrl(benchmark, "iql", loss.make_value_estimator(gamma=GAMMA), make_batch())


def test_iql_plain(benchmark):
    torch.manual_seed(0)
    actor, value = mlp(OBS, 2 * ACT), mlp(OBS, 1)
    critics = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
    targets = clone_frozen(critics)
    b = make_batch()
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]

    def losses():
        sa = torch.cat([obs, action], -1)
        with torch.no_grad():
            q_target = torch.min(targets[0](sa), targets[1](sa))
            y = bootstrap(b, value(nobs))
        v = value(obs)
        u = q_target - v
        value_loss = ((0.7 - (u < 0).float()).abs() * u.pow(2)).mean()
        q_loss = sum(0.5 * (c(sa) - y).pow(2).mean() for c in critics)
        weights = torch.exp(3.0 * (q_target - v.detach())).clamp(max=100.0)
        actor_loss = -(weights * tanh_normal_log_prob(actor(obs), action)).mean()
        return actor_loss + q_loss + value_loss

    run_plain(benchmark, "iql", [actor, value, critics], losses)
