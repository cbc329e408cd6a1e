"""Every off-policy loss: SoftUpdate/HardUpdate move its targets, and a single transition works."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from tdrl.modules import MLP, NormalParamExtractor, OneHotCategorical, TanhNormal
from tdrl.objectives import (
    CQLLoss,
    DDPGLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    DQNLoss,
    HardUpdate,
    IQLLoss,
    REDQLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
)

OBS, ACT = 3, 2


def _policy():
    net = nn.Sequential(MLP(OBS, 2 * ACT, num_cells=8), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"], distribution_class=TanhNormal),
    )


def _categorical_policy():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(MLP(OBS, ACT, num_cells=8), ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(["logits"], ["action"], distribution_class=OneHotCategorical),
    )


def _critic():
    return TensorDictModule(
        MLP(OBS + ACT, 1, num_cells=8), ["observation", "action"], ["state_action_value"]
    )


def _qnet():
    return TensorDictModule(MLP(OBS, ACT, num_cells=8), ["observation"], ["action_value"])


def _actor():
    net = nn.Sequential(MLP(OBS, ACT, num_cells=8), nn.Tanh())
    return TensorDictModule(net, ["observation"], ["action"])


def _value():
    return TensorDictModule(MLP(OBS, 1, num_cells=8), ["observation"], ["state_value"])


LOSSES = {
    "dqn": (lambda: DQNLoss(_qnet()), True),
    "discrete_cql": (lambda: DiscreteCQLLoss(_qnet()), True),
    "ddpg": (lambda: DDPGLoss(_actor(), _critic(), delay_actor=True), False),
    "td3": (lambda: TD3Loss(_actor(), _critic(), bounds=(-1.0, 1.0)), False),
    "sac": (lambda: SACLoss(_policy(), _critic()), False),
    "redq": (lambda: REDQLoss(_policy(), _critic(), num_qvalue_nets=4), False),
    "cql": (lambda: CQLLoss(_policy(), _critic(), num_random=2), False),
    "iql": (lambda: IQLLoss(_policy(), _critic(), value_network=_value()), False),
    "discrete_sac": (
        lambda: DiscreteSACLoss(_categorical_policy(), _qnet(), num_actions=ACT),
        True,
    ),
    "discrete_iql": (
        lambda: DiscreteIQLLoss(_categorical_policy(), _qnet(), value_network=_value()).set_keys(
            state_action_value="action_value"
        ),
        True,
    ),
}


def _batch(discrete, batch=(5,)):
    if discrete:
        action = torch.eye(ACT)[torch.randint(ACT, batch)]
    else:
        action = torch.rand(*batch, ACT) * 1.8 - 0.9
    flag = torch.zeros(*batch, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": torch.randn(*batch, OBS),
            "action": action,
            "next": {
                "observation": torch.randn(*batch, OBS),
                "reward": torch.randn(*batch, 1),
                "done": flag,
                "terminated": flag,
            },
        },
        batch,
    )


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_updaters_move_every_target_and_gradients_skip_them(name):
    torch.manual_seed(0)
    make, discrete = LOSSES[name]
    loss = make()
    optim = torch.optim.SGD(loss.parameters(), lr=0.1)
    soft = SoftUpdate(loss, tau=0.5)  # built before training: building copies live -> target
    before = [target.clone() for _, target in loss.target_pairs()]
    assert before, "the loss has no target"
    out = loss(_batch(discrete))
    sum(v for k, v in out.items() if k.startswith("loss")).backward()
    optim.step()
    for (_, target), old in zip(loss.target_pairs(), before):
        _assert_close(target, old)  # a gradient step leaves the targets alone
    soft.step()
    for (live, target), old in zip(loss.target_pairs(), before):
        _assert_close(target, old.apply(lambda o, v: (o + v) / 2, live.data))
    HardUpdate(loss, value_network_update_interval=1).step()
    for live, target in loss.target_pairs():
        _assert_close(target, live.data)


def _assert_close(a, b):
    for key in b.keys(True, True):
        torch.testing.assert_close(a.get(key), b.get(key), msg=str(key))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_single_transition_without_batch_dims(name):
    torch.manual_seed(0)
    make, discrete = LOSSES[name]
    batch = _batch(discrete, batch=())
    out = make()(batch)
    assert batch["td_error"].numel() == 1  # DQN's keeps the value's dim: [1]
    for key, value in out.items():
        if key.startswith("loss_"):
            assert torch.isfinite(value), key
