"""Offline loss benchmarks (issue 24): one training update of each tdrl loss beside plain PyTorch.

Each group times a full update (loss forward, backward, Adam step) of the tdrl loss (``tdrl``)
and of a hand-written plain PyTorch version of the same update (``plain``,
``offline_plain.py``: copies of the loss's own networks called on plain tensors, the same
maths), on the same batch, so the ratio is visible in one run::

    .venv/bin/python -m pytest benchmarks/test_losses_offline.py --benchmark-enable \\
        -p no:randomly

Groups: ``bc`` (``BCLoss`` on a deterministic tanh actor: the squared error, its default for a
deterministic actor), ``bc_nll`` (``BCLoss`` on a TanhNormal ``ProbabilisticActor``: the
negative log-likelihood), ``td3bc`` (``TD3BCLoss``, bounds (-1, 1), 2 critics), ``dt``
(``DTLoss`` on a ``DTActor`` with a ``TanhDelta`` on [-1, 1]) and ``online_dt``
(``OnlineDTLoss`` on an ``OnlineDTActor`` with a ``TanhNormal``).

Rounds are timed in process CPU time with one intra-op thread, as
``test_losses_offpolicy.py`` (whose sizes, batches and MLP builders the BC and TD3+BC groups
share: ``small`` ReLU MLPs 2 x 64, batch 128; ``mujoco`` 2 x 256, batch 256; 17 observations,
6 action dims). The Decision Transformers read context windows of 17 observations, 6 actions
and a return-to-go: ``small`` batch 16 x 10 steps, 64 wide, 1 layer, 1 head; ``mujoco`` batch
64 x 20 steps, 128 wide, 3 layers, 1 head (MLP 4 x wide; dropouts 0.1, in training mode on both
sides). Target-network updates are not timed.
"""

from __future__ import annotations

import functools
import operator
import time
from dataclasses import dataclass

import offline_plain as plain
import pytest
import test_losses_offpolicy as base
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import DTActor, OnlineDTActor, ProbabilisticActor, TanhDelta, TanhNormal
from tdrl.objectives import BCLoss, DTLoss, OnlineDTLoss, TD3BCLoss
from tdrl.specs import Bounded

torch.set_num_threads(1)

pytestmark = pytest.mark.benchmark(
    timer=time.process_time, max_time=1.0, min_rounds=5, warmup=True, warmup_iterations=2
)
GAMMA = base.GAMMA
SIZES = base.SIZES
DT_KEYS = ["observation", "action", "return_to_go"]


@dataclass(frozen=True)
class DTSize:
    batch: int
    context: int
    n_embd: int
    n_layer: int
    n_head: int


DT_SIZES = {"small": DTSize(16, 10, 64, 1, 1), "mujoco": DTSize(64, 20, 128, 3, 1)}


# ----------------------------------------------------------------- data and tdrl losses
def make_dt_batch(size: DTSize, seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    shape = (size.batch, size.context)
    obs, act = SIZES["mujoco"].obs, SIZES["mujoco"].act
    return TensorDict(
        {
            "observation": torch.randn(*shape, obs, generator=g),
            "action": torch.rand(*shape, act, generator=g) * 1.8 - 0.9,
            "return_to_go": torch.randn(*shape, 1, generator=g),
        },
        list(shape),
    )


def dt_config(size: DTSize):
    config = DTActor.default_config()
    config.n_embd, config.n_layer, config.n_head = size.n_embd, size.n_layer, size.n_head
    config.n_inner = 4 * size.n_embd
    return config


def dt_actor(online: bool, size: DTSize) -> ProbabilisticActor:
    obs, act = SIZES["mujoco"].obs, SIZES["mujoco"].act
    spec = Bounded(-1.0, 1.0, (act,))
    if online:
        net = TensorDictModule(OnlineDTActor(obs, act, dt_config(size)), DT_KEYS, ["loc", "scale"])
        return ProbabilisticActor(net, ["loc", "scale"], spec=spec, distribution_class=TanhNormal)
    net = TensorDictModule(DTActor(obs, act, dt_config(size)), DT_KEYS, ["param"])
    return ProbabilisticActor(
        net,
        ["param"],
        spec=spec,
        distribution_class=TanhDelta,
        distribution_kwargs={"low": -1.0, "high": 1.0},
    )


def tdrl_loss(name: str, size: str) -> nn.Module:
    torch.manual_seed(0)
    if name in ("dt", "online_dt"):
        actor = dt_actor(name == "online_dt", DT_SIZES[size])
        return OnlineDTLoss(actor) if name == "online_dt" else DTLoss(actor)
    mlp_size = SIZES[size]
    if name == "bc":
        return BCLoss(base.deterministic_actor(mlp_size))
    if name == "bc_nll":
        return BCLoss(base.tanh_policy(mlp_size))
    loss = TD3BCLoss(base.deterministic_actor(mlp_size), base.critic(mlp_size), bounds=(-1.0, 1.0))
    return loss.make_value_estimator(gamma=GAMMA)


def make_batch(name: str, size: str) -> TensorDict:
    if name in ("dt", "online_dt"):
        return make_dt_batch(DT_SIZES[size])
    return base.make_batch(SIZES[size])


def plain_update(name: str, loss: nn.Module, batch: TensorDict) -> plain.Update:
    """The plain version of a group, from the tdrl loss's weights: (modules, losses, errors)."""
    if name == "dt":
        return plain.dt(loss, batch, DTActor)
    if name == "online_dt":
        return plain.online_dt(loss, batch, OnlineDTActor)
    builders = {"bc": plain.bc, "bc_nll": plain.bc_nll, "td3bc": plain.td3bc}
    return builders[name](loss, batch, GAMMA)


NAMES = ["bc", "bc_nll", "td3bc", "dt", "online_dt"]
STEPS: dict = {}  # (group, impl) -> step, kept for interleaved re-measurement by hand


@pytest.mark.parametrize("impl", ["tdrl", "plain"])
@pytest.mark.parametrize("size", ["small", "mujoco"])
@pytest.mark.parametrize("name", NAMES)
def test_update(benchmark, name: str, size: str, impl: str) -> None:
    benchmark.group = f"{name} {size}"
    loss = tdrl_loss(name, size)
    batch = make_batch(name, size)
    if impl == "tdrl":
        step = base.tdrl_step(loss, batch)
    else:
        step = base.plain_step(*plain_update(name, loss, batch))
    STEPS[benchmark.group, impl] = step
    benchmark(step)


@pytest.mark.parametrize("name", NAMES)
def test_plain_matches_tdrl(name: str) -> None:
    """Each baseline computes tdrl's summed loss (and TD3+BC's TD error) from the same weights
    and the same random draws (target noise, dropout masks, entropy samples: one seed)."""
    loss = tdrl_loss(name, "small")
    batch = make_batch(name, "small")
    written = batch.clone()
    torch.manual_seed(1)
    out = loss(written)
    total = functools.reduce(operator.add, [v for k, v in out.items() if k.startswith("loss")])
    _, losses, errors = plain_update(name, loss, batch)
    torch.manual_seed(1)
    torch.testing.assert_close(losses(), total)
    if name == "td3bc":
        torch.testing.assert_close(errors["td_error"], written["td_error"])
