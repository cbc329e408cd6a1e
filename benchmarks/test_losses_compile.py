"""torch.compile and loss updates: SAC, TD3, DQN and PPO, eager and compiled, tdrl and plain.

Each group times one training update (loss forward, backward, fused Adam step) on a batch of 256
transitions, five ways, so that the speed-up of compilation and the tdrl / plain ratio show in
one run::

    .venv/bin/python -m pytest benchmarks/test_losses_compile.py --benchmark-enable \\
        -p no:cacheprovider

- ``tdrl``: the eager tdrl loss;
- ``tdrl-compiled``: ``torch.compile(update)`` of the whole step (TorchRL's scripts' way);
- ``tdrl-loss-compiled``: ``loss.compile()`` (the forward only), eager backward and step;
- ``plain`` / ``plain-compiled``: a hand-written PyTorch update of the same maths.

Compilation (inductor, default mode) happens before the timed rounds (a few warm-up calls).
Rounds are timed in process CPU time (``time.process_time``) with one intra-op thread.
Sizes: SAC and TD3 use observations of 17 dims, actions of 6, ReLU MLPs of 256x256, 2
critics; DQN uses 4 observations, 2 actions and two hidden layers of 64 (``dqn64``) or 256
(``dqn256``) units; PPO is the ``ppo`` preset's minibatch step (CartPole sizes, one-hot
categorical policy and critic of 64x64 tanh, clipped objective with normalised advantages
already in the batch, squared-error critic). Every update uses the squared error. Target
updates are not timed. The ``*-policy`` groups time one collector policy call of the SAC and
DQN presets (compiled as ``compile_policy`` does) beside a plain version.
"""

from __future__ import annotations

import copy
import math
import time

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torch.func import functional_call

from tdrl.modules import (
    MLP,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
    ValueOperator,
)
from tdrl.objectives import ClipPPOLoss, DQNLoss, LossModule, SACLoss, TD3Loss

# TorchRL's biased softplus scale (NormalParamExtractor's default): softplus(raw +
# _SHIFT) + 0.01, which is 1 at raw = 0
_SHIFT = math.log(math.expm1(0.99))

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.benchmark(
        timer=time.process_time, max_time=2.0, min_rounds=10, warmup=True, warmup_iterations=3
    ),
    # inductor builds C++ on a cold cache: tens of seconds per case, more on a busy machine
    pytest.mark.timeout(300),
]

OBS, ACT, HIDDEN, BATCH, GAMMA = 17, 6, 256, 256, 0.99
DQN_OBS, DQN_ACT = 4, 2
KINDS = ["tdrl", "tdrl-compiled", "tdrl-loss-compiled", "plain", "plain-compiled"]


@pytest.fixture(autouse=True)
def _fresh_compile_caches():
    """Each benchmark compiles from empty caches: compiled functions share code objects (the
    update closure, the optimiser's), whose caches would otherwise fill up across tests."""
    torch._dynamo.reset()


# ----------------------------------------------------------------- data and networks
def make_batch(discrete: bool = False) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    obs = DQN_OBS if discrete else OBS
    if discrete:
        action = torch.randint(DQN_ACT, (BATCH,), generator=g)
    else:
        action = torch.rand(BATCH, ACT, generator=g) * 1.8 - 0.9
    terminated = torch.rand(BATCH, 1, generator=g) < 0.05
    nxt = {
        "observation": torch.randn(BATCH, obs, generator=g),
        "reward": torch.randn(BATCH, 1, generator=g),
        "done": terminated.clone(),
        "terminated": terminated,
    }
    return TensorDict(
        {"observation": torch.randn(BATCH, obs, generator=g), "action": action, "next": nxt},
        [BATCH],
    )


def mlp(n_in: int, n_out: int, hidden: int = HIDDEN) -> MLP:
    return MLP(n_in, n_out, num_cells=[hidden, hidden], activation_class=nn.ReLU)


def frozen(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` with detached weights: gradients reach ``x`` only (compile-friendly)."""
    params = {k: v.detach() for k, v in module.named_parameters()}
    return functional_call(module, params, (x,))


def bootstrap(batch: TensorDict, next_value: torch.Tensor) -> torch.Tensor:
    nxt = batch["next"]
    return nxt["reward"] + GAMMA * (~nxt["terminated"]).float() * next_value


def tanh_normal(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised TanhNormal sample on [-1, 1] and its log-probability."""
    loc, raw = out.chunk(2, -1)
    scale = (F.softplus(raw + _SHIFT) + 0.01).clamp_min(1e-4)
    x = loc + scale * torch.randn_like(loc)
    log_prob = -0.5 * ((x - loc) / scale).pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
    log_det = 2 * (math.log(2) - x - F.softplus(-2 * x))
    return torch.tanh(x), (log_prob - log_det).sum(-1, keepdim=True)


# ----------------------------------------------------------------- update steps
def make_step(modules: list[nn.Module], losses, compiled: bool):
    """One update: ``losses()`` (a scalar), backward, Adam step; compiled whole if asked.

    Adam is the fused CPU kernel, eager's fastest and the ``tdrl train`` trainers' optimiser.
    """
    params = [p for m in modules for p in m.parameters()]
    optim = torch.optim.Adam(params, lr=1e-4, fused=True)

    def step() -> torch.Tensor:
        total = losses()
        optim.zero_grad()
        total.backward()
        optim.step()
        return total.detach()

    return torch.compile(step) if compiled else step


def tdrl_step(loss: LossModule, batch: TensorDict, kind: str):
    terms = [k for k in loss(batch).keys() if k == "loss" or k.startswith("loss_")]
    if kind == "tdrl-loss-compiled":
        loss.compile()

    def losses() -> torch.Tensor:
        out = loss(batch)
        return sum(out[k] for k in terms)  # type: ignore[return-value]

    return make_step([loss], losses, compiled=kind == "tdrl-compiled")


def run(benchmark, group: str, step) -> None:
    benchmark.group = group
    for _ in range(3):  # compiles (not timed)
        step()
    benchmark(step)


# ----------------------------------------------------------------- SAC
def tdrl_sac(kind: str):
    net = nn.Sequential(mlp(OBS, 2 * ACT), NormalParamExtractor())
    module = TensorDictModule(net, ["observation"], ["loc", "scale"])
    actor = ProbabilisticActor(module, ["loc", "scale"], distribution_class=TanhNormal)
    critic = TensorDictModule(mlp(OBS + ACT, 1), ["observation", "action"], ["state_action_value"])
    loss = SACLoss(actor, critic, loss_function="l2").make_value_estimator(gamma=GAMMA)
    return tdrl_step(loss, make_batch(), kind)


def plain_sac(kind: str):
    actor = mlp(OBS, 2 * ACT)
    critics = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
    targets = copy.deepcopy(critics).requires_grad_(False)
    log_alpha = nn.Parameter(torch.zeros(()))
    b = make_batch()
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]

    def losses() -> torch.Tensor:
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_lp = tanh_normal(actor(nobs))
            nsa = torch.cat([nobs, next_action], -1)
            next_q = torch.min(targets[0](nsa), targets[1](nsa))
            y = bootstrap(b, next_q - alpha * next_lp)
        sa = torch.cat([obs, action], -1)
        q_loss = sum((c(sa) - y).pow(2).mean() for c in critics)
        new_action, lp = tanh_normal(actor(obs))
        sa_pi = torch.cat([obs, new_action], -1)
        q_pi = torch.min(frozen(critics[0], sa_pi), frozen(critics[1], sa_pi))
        actor_loss = (alpha * lp - q_pi).mean()
        alpha_loss = -(log_alpha * (lp.detach() - ACT)).mean()
        return actor_loss + q_loss + alpha_loss

    holder = nn.ParameterList([log_alpha])
    return make_step([actor, critics, holder], losses, compiled=kind == "plain-compiled")


@pytest.mark.parametrize("kind", KINDS)
def test_sac(benchmark, kind):
    torch.manual_seed(0)
    run(benchmark, "sac", tdrl_sac(kind) if kind.startswith("tdrl") else plain_sac(kind))


# ----------------------------------------------------------------- TD3
def tdrl_td3(kind: str):
    actor = TensorDictModule(nn.Sequential(mlp(OBS, ACT), nn.Tanh()), ["observation"], ["action"])
    critic = TensorDictModule(mlp(OBS + ACT, 1), ["observation", "action"], ["state_action_value"])
    loss = TD3Loss(actor, critic, bounds=(-1.0, 1.0), loss_function="l2")
    return tdrl_step(loss.make_value_estimator(gamma=GAMMA), make_batch(), kind)


def plain_td3(kind: str):
    actor = nn.Sequential(mlp(OBS, ACT), nn.Tanh())
    critics = nn.ModuleList([mlp(OBS + ACT, 1) for _ in range(2)])
    target_actor = copy.deepcopy(actor).requires_grad_(False)
    target_critics = copy.deepcopy(critics).requires_grad_(False)
    b = make_batch()
    obs, nobs, action = b["observation"], b["next", "observation"], b["action"]

    def losses() -> torch.Tensor:
        with torch.no_grad():
            next_action = target_actor(nobs)
            noise = (torch.randn_like(next_action) * 0.2).clamp(-0.5, 0.5)
            nsa = torch.cat([nobs, (next_action + noise).clamp(-1.0, 1.0)], -1)
            y = bootstrap(b, torch.min(target_critics[0](nsa), target_critics[1](nsa)))
        sa = torch.cat([obs, action], -1)
        q_loss = sum((c(sa) - y).pow(2).mean() for c in critics)
        actor_loss = -frozen(critics[0], torch.cat([obs, actor(obs)], -1)).mean()
        return actor_loss + q_loss

    return make_step([actor, critics], losses, compiled=kind == "plain-compiled")


@pytest.mark.parametrize("kind", KINDS)
def test_td3(benchmark, kind):
    torch.manual_seed(0)
    run(benchmark, "td3", tdrl_td3(kind) if kind.startswith("tdrl") else plain_td3(kind))


# ----------------------------------------------------------------- DQN
def tdrl_dqn(kind: str, hidden: int):
    net = TensorDictModule(mlp(DQN_OBS, DQN_ACT, hidden), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="categorical").make_value_estimator(gamma=GAMMA)
    return tdrl_step(loss, make_batch(discrete=True), kind)


def plain_dqn(kind: str, hidden: int):
    net = mlp(DQN_OBS, DQN_ACT, hidden)
    target = copy.deepcopy(net).requires_grad_(False)
    b = make_batch(discrete=True)

    def losses() -> torch.Tensor:
        q = net(b["observation"]).gather(-1, b["action"].unsqueeze(-1))
        with torch.no_grad():
            y = bootstrap(b, target(b["next", "observation"]).max(-1, keepdim=True).values)
        return (q - y).pow(2).mean()

    return make_step([net], losses, compiled=kind == "plain-compiled")


@pytest.mark.parametrize("hidden", [64, 256])
@pytest.mark.parametrize("kind", KINDS)
def test_dqn(benchmark, kind, hidden):
    torch.manual_seed(0)
    step = tdrl_dqn(kind, hidden) if kind.startswith("tdrl") else plain_dqn(kind, hidden)
    run(benchmark, f"dqn{hidden}", step)


# ----------------------------------------------------------------- PPO (the ppo preset's step)
PPO_OBS, PPO_ACT, PPO_HIDDEN, CLIP = 4, 2, 64, 0.2


def ppo_batch() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    action = torch.eye(PPO_ACT)[torch.randint(PPO_ACT, (BATCH,), generator=g)]
    return TensorDict(
        observation=torch.randn(BATCH, PPO_OBS, generator=g),
        action=action,
        action_log_prob=torch.full((BATCH,), math.log(0.5)) + 0.1 * torch.randn(BATCH, generator=g),
        advantage=torch.randn(BATCH, 1, generator=g),
        value_target=torch.randn(BATCH, 1, generator=g),
        batch_size=[BATCH],
    )


def ppo_mlp(n_out: int) -> MLP:
    return MLP(PPO_OBS, n_out, num_cells=[PPO_HIDDEN, PPO_HIDDEN], activation_class=nn.Tanh)


def tdrl_ppo(kind: str):
    module = TensorDictModule(ppo_mlp(PPO_ACT), ["observation"], ["logits"])
    actor = ProbabilisticActor(module, ["logits"], distribution_class=OneHotCategorical)
    critic = ValueOperator(ppo_mlp(1), in_keys=["observation"])
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=CLIP,
        entropy_bonus=False,
        critic_coeff=0.5,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    return tdrl_step(loss, ppo_batch(), kind)


def plain_ppo(kind: str):
    actor, critic = ppo_mlp(PPO_ACT), ppo_mlp(1)
    b = ppo_batch()
    obs, index, old_lp = (
        b["observation"],
        b["action"].argmax(-1, keepdim=True),
        b["action_log_prob"],
    )
    adv, target = b["advantage"], b["value_target"]

    def losses() -> torch.Tensor:
        lp = torch.log_softmax(actor(obs), -1).gather(-1, index).squeeze(-1)
        ratio = (lp - old_lp).exp().unsqueeze(-1)
        a = (adv - adv.mean()) / adv.std().clamp_min(1e-6)
        objective = -torch.min(ratio * a, ratio.clamp(1 - CLIP, 1 + CLIP) * a).mean()
        return objective + 0.5 * (critic(obs) - target).pow(2).mean()

    return make_step([actor, critic], losses, compiled=kind == "plain-compiled")


@pytest.mark.parametrize("kind", KINDS)
def test_ppo(benchmark, kind):
    torch.manual_seed(0)
    run(benchmark, "ppo", tdrl_ppo(kind) if kind.startswith("tdrl") else plain_ppo(kind))


# ----------------------------------------------------------------- collector policies
# One policy call as the collector makes it (``compile_policy``), with the ``tdrl train``
# presets' networks: SAC's TanhNormal actor on Pendulum (one env, 256x256) and DQN's
# Q-network with epsilon-greedy exploration on CartPole (8 envs, 256x256).
def tdrl_policy(algo: str, compiled: bool):
    from tdrl.objectives._compile import compile_kwargs
    from tdrl.train import load_config
    from tdrl.train._builders import make_env
    from tdrl.train._off_policy_agents import make_agent

    config = load_config(algo)
    env = make_env(config["env"], int(config["num_envs"]), seed=0)
    policy = make_agent(algo, env, config).collect_policy
    td = env.reset()
    call = torch.compile(policy, **compile_kwargs("bench", {})) if compiled else policy

    def act() -> TensorDictBase:
        with torch.no_grad():  # as the collector calls it (the plain versions too)
            return call(td)

    return act


def plain_policy(algo: str, compiled: bool):
    if algo == "sac":
        net, obs = mlp(3, 2), torch.randn(1, 3)

        def act() -> torch.Tensor:
            with torch.no_grad():
                return tanh_normal(net(obs))[0]

    else:
        net, obs = mlp(DQN_OBS, DQN_ACT), torch.randn(8, DQN_OBS)

        def act() -> torch.Tensor:
            with torch.no_grad():
                greedy = net(obs).argmax(-1)
                explore = torch.rand(greedy.shape) < 0.1
                return torch.where(explore, torch.randint_like(greedy, DQN_ACT), greedy)

    return torch.compile(act, options={"fallback_random": True}) if compiled else act


@pytest.mark.parametrize("algo", ["sac", "dqn"])
@pytest.mark.parametrize("kind", ["tdrl", "tdrl-compiled", "plain", "plain-compiled"])
def test_policy(benchmark, kind, algo):
    torch.manual_seed(0)
    compiled = kind.endswith("compiled")
    make = tdrl_policy if kind.startswith("tdrl") else plain_policy
    run(benchmark, f"{algo}-policy", make(algo, compiled))
