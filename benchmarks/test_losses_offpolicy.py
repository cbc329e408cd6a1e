"""Off-policy loss benchmarks: one training update of each tdrl loss beside plain PyTorch.

Each group (``dqn``, ``ddpg``, ``td3``, ``sac``, ``discrete_sac``, ``redq``, ``cql``, ``iql``,
at two sizes) times a full update (loss forward, backward, Adam step) of the tdrl loss
(``tdrl``) and of a hand-written plain PyTorch version of the same update (``plain``,
``offpolicy_plain.py``: the same networks, critic ensembles vectorised, the same maths and the
TD error the tdrl loss returns), on the same batch, so the ratio is visible in one run::

    .venv/bin/python -m pytest benchmarks/test_losses_offpolicy.py --benchmark-enable \\
        -p no:randomly

Rounds are timed in process CPU time (``time.process_time``), which other processes on shared
cores do not inflate; one intra-op thread.

Sizes: ``small`` (classic control: ReLU MLPs 2 x 64, batch 128; DQN and discrete SAC with 4
observations and 2 actions) and ``mujoco`` (2 x 256, batch 256; 17 observations, 6 action dims,
DQN and discrete SAC with 6 actions). SAC, TD3, CQL, IQL and discrete SAC use 2 critics, REDQ 10
critics with target subsets of 2, CQL 10 proposals of each kind per state. Target-network
updates are not timed (``test_update_step.py`` times a whole step).
"""

from __future__ import annotations

import functools
import operator
import time
from dataclasses import dataclass

import offpolicy_plain as plain
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import (
    MLP,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
)
from tdrl.objectives import (
    CQLLoss,
    DDPGLoss,
    DiscreteSACLoss,
    DQNLoss,
    IQLLoss,
    REDQLoss,
    SACLoss,
    TD3Loss,
)

torch.set_num_threads(1)

# CPU time of the process, not wall time: on shared cores a preempted round would otherwise
# count the time other processes ran (with one intra-op thread, backward runs on this thread).
pytestmark = pytest.mark.benchmark(
    timer=time.process_time, max_time=1.0, min_rounds=5, warmup=True, warmup_iterations=2
)
GAMMA = 0.99


@dataclass(frozen=True)
class Size:
    hidden: int
    batch: int
    obs: int  # continuous tasks
    act: int
    discrete_obs: int  # DQN and discrete SAC
    discrete_act: int


SIZES = {"small": Size(64, 128, 17, 6, 4, 2), "mujoco": Size(256, 256, 17, 6, 17, 6)}


# ----------------------------------------------------------------- data and tdrl networks
def make_batch(size: Size, discrete: bool = False, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    n, obs = size.batch, size.discrete_obs if discrete else size.obs
    action = (
        torch.randint(size.discrete_act, (n,), generator=g)
        if discrete
        else torch.rand(n, size.act, generator=g) * 1.8 - 0.9
    )
    terminated = torch.rand(n, 1, generator=g) < 0.05
    return TensorDict(
        {
            "observation": torch.randn(n, obs, generator=g),
            "action": action,
            "next": {
                "observation": torch.randn(n, obs, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": terminated.clone(),
                "terminated": terminated,
            },
        },
        [n],
    )


def mlp(n_in: int, n_out: int, size: Size) -> MLP:
    return MLP(n_in, n_out, num_cells=[size.hidden, size.hidden], activation=nn.ReLU)


def tanh_policy(size: Size) -> ProbabilisticActor:
    net = nn.Sequential(mlp(size.obs, 2 * size.act, size), NormalParamExtractor())
    module = TensorDictModule(net, ["observation"], ["loc", "scale"])
    return ProbabilisticActor(module, ["loc", "scale"], distribution_class=TanhNormal)


def critic(size: Size) -> TensorDictModule:
    net = mlp(size.obs + size.act, 1, size)
    return TensorDictModule(net, ["observation", "action"], ["state_action_value"])


def deterministic_actor(size: Size) -> TensorDictModule:
    net = nn.Sequential(mlp(size.obs, size.act, size), nn.Tanh())
    return TensorDictModule(net, ["observation"], ["action"])


def q_net(size: Size) -> TensorDictModule:
    net = mlp(size.discrete_obs, size.discrete_act, size)
    return TensorDictModule(net, ["observation"], ["action_value"])


def categorical_policy(size: Size) -> ProbabilisticActor:
    net = mlp(size.discrete_obs, size.discrete_act, size)
    module = TensorDictModule(net, ["observation"], ["logits"])
    return ProbabilisticActor(module, ["logits"], distribution_class=OneHotCategorical)


def tdrl_loss(name: str, size: Size) -> nn.Module:
    """The tdrl loss of a group, with TD(0) targets at ``GAMMA``."""
    torch.manual_seed(0)
    if name == "dqn":
        loss = DQNLoss(q_net(size), action_space="categorical")
    elif name == "ddpg":
        loss = DDPGLoss(deterministic_actor(size), critic(size))
    elif name == "td3":
        loss = TD3Loss(deterministic_actor(size), critic(size), bounds=(-1.0, 1.0))
    elif name == "sac":
        loss = SACLoss(tanh_policy(size), critic(size))
    elif name == "discrete_sac":
        loss = DiscreteSACLoss(
            categorical_policy(size),
            q_net(size),
            num_actions=size.discrete_act,
            action_space="categorical",
        )
    elif name == "redq":
        loss = REDQLoss(tanh_policy(size), critic(size), num_qvalue_nets=10, sub_sample_len=2)
    elif name == "cql":
        loss = CQLLoss(tanh_policy(size), critic(size), num_random=10)
    else:
        value = TensorDictModule(mlp(size.obs, 1, size), ["observation"], ["state_value"])
        loss = IQLLoss(tanh_policy(size), critic(size), value_network=value)
    return loss.make_value_estimator(gamma=GAMMA)


def plain_update(name: str, loss: nn.Module, batch: TensorDict):
    """The plain version of a group, from the tdrl loss's weights: (modules, losses, errors)."""
    builders = {
        "dqn": plain.dqn,
        "ddpg": plain.ddpg,
        "td3": plain.td3,
        "sac": functools.partial(plain.soft, subset=None),
        "discrete_sac": plain.discrete_sac,
        "redq": functools.partial(plain.soft, subset=2),
        "cql": functools.partial(plain.cql, n=10),
        "iql": plain.iql,
    }
    return builders[name](loss, batch, GAMMA)


def tdrl_step(loss: nn.Module, batch: TensorDict):
    optim = torch.optim.Adam(loss.parameters(), lr=1e-4)
    terms = [k for k in loss(batch).keys() if k == "loss" or k.startswith("loss_")]

    def step() -> torch.Tensor:
        out = loss(batch)
        total = functools.reduce(operator.add, [out[k] for k in terms])
        optim.zero_grad()
        total.backward()
        optim.step()
        return total

    return step


def plain_step(modules: list[nn.Module], losses, errors):
    optim = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=1e-4)

    def step() -> torch.Tensor:
        total = losses()
        optim.zero_grad()
        total.backward()
        optim.step()
        return total

    return step


NAMES = ["dqn", "ddpg", "td3", "sac", "discrete_sac", "redq", "cql", "iql"]
STEPS: dict = {}  # (group, impl) -> step, kept for interleaved re-measurement by hand


@pytest.mark.parametrize("impl", ["tdrl", "plain"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", NAMES)
def test_update(benchmark, name: str, size: str, impl: str) -> None:
    benchmark.group = f"{name} {size}"
    loss = tdrl_loss(name, SIZES[size])
    batch = make_batch(SIZES[size], discrete=name in ("dqn", "discrete_sac"))
    if impl == "tdrl":
        step = tdrl_step(loss, batch)
    else:
        step = plain_step(*plain_update(name, loss, batch))
    STEPS[benchmark.group, impl] = step
    benchmark(step)


@pytest.mark.parametrize("name", ["dqn", "ddpg", "iql"])
def test_plain_matches_tdrl(name: str) -> None:
    """The deterministic baselines compute tdrl's loss and TD error from the same weights."""
    size = SIZES["small"]
    loss = tdrl_loss(name, size)
    batch = make_batch(size, discrete=name == "dqn")
    written = batch.clone()
    out = loss(written)
    td_error = out["td_error"] if "td_error" in out.keys() else written["td_error"]  # DQN: batch
    total = functools.reduce(operator.add, [v for k, v in out.items() if k.startswith("loss")])
    _, losses, errors = plain_update(name, loss, batch)
    torch.testing.assert_close(losses(), total)
    torch.testing.assert_close(errors["td_error"].reshape(-1), td_error.reshape(-1))
