"""SoftUpdate's single foreach step: the same bits as a TensorDict lerp_ per network."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.objectives import DQNLoss, SACLoss, SoftUpdate, TD3Loss
from tdrl.testing import (
    make_action_value_net,
    make_deterministic_actor,
    make_qvalue_critic,
    make_tanh_normal_actor,
    make_transition_batch,
    perturb_,
)


def _losses():
    return {
        "dqn": DQNLoss(make_action_value_net(), action_space="one_hot"),
        "sac": SACLoss(make_tanh_normal_actor(), make_qvalue_critic()),  # an ensemble
        "td3": TD3Loss(make_deterministic_actor(), make_qvalue_critic(), bounds=(-1.0, 1.0)),
    }


def _reference_step(loss, tau: float) -> list[TensorDictBase]:
    """What SoftUpdate computed before its foreach step: ``target.lerp_(live, tau)`` per
    network, on copies of the targets."""
    out = []
    for live, target in loss.target_pairs():
        out.append(target.data.clone().lerp_(live.data, tau))
    return out


def _moved(loss) -> None:
    """Live weights that differ from the targets, as after optimiser steps."""
    with torch.no_grad():
        for live, _ in loss.target_pairs():
            perturb_(live.data)


@pytest.mark.parametrize("algo", ["dqn", "sac", "td3"])
def test_soft_update_gives_the_bits_of_a_lerp_per_network(algo):
    torch.manual_seed(0)
    loss = _losses()[algo]
    updater = SoftUpdate(loss, tau=0.005)
    for _ in range(3):
        _moved(loss)
        expected = _reference_step(loss, 0.005)
        updater.step()
        got = [target.data for _, target in loss.target_pairs()]
        assert len(got) == len(expected) == (2 if algo == "td3" else 1)
        for g, e in zip(got, expected):
            assert (g == e).all(), "the target differs from TensorDict.lerp_'s in its bits"


def test_soft_update_follows_parameters_changed_in_place_and_leaves_live_alone():
    loss = _losses()["dqn"]
    updater = SoftUpdate(loss, tau=0.5)
    live = loss.value_network.module[0].weight
    with torch.no_grad():
        live.fill_(2.0)
        loss.value_network_target_params["module", "0", "weight"].zero_()
    updater.step()
    assert (loss.value_network_target_params["module", "0", "weight"] == 1.0).all()
    assert (live == 2.0).all()
    loss.load_state_dict({**loss.state_dict(), "value_network.module.0.weight": live * 0 + 4.0})
    updater.step()  # the cached leaves are the loss's tensors: a loaded state is seen
    assert (loss.value_network_target_params["module", "0", "weight"] == 2.5).all()


def test_soft_update_of_a_lazy_network_after_its_first_call():
    net = TensorDictModule(nn.Sequential(nn.LazyLinear(2)), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="one_hot")
    updater = SoftUpdate(loss, tau=0.5)
    updater.step()  # no target yet: nothing to move
    loss(make_transition_batch(action="one_hot"))  # builds the weights and the target
    with torch.no_grad():
        loss.value_network_target_params.zero_()
        net.module[0].weight.fill_(1.0)
    updater.step()
    assert (loss.value_network_target_params["module", "0", "weight"] == 0.5).all()


def test_a_subclass_step_rule_is_still_used():
    class Halfway(SoftUpdate):
        def _step(self, p_source, p_target):
            p_target.lerp_(p_source, 0.5)

    loss = _losses()["dqn"]
    updater = Halfway(loss, tau=0.001)
    with torch.no_grad():
        loss.value_network.module[0].bias.fill_(2.0)
        loss.value_network_target_params.zero_()
    updater.step()
    assert (loss.value_network_target_params["module", "0", "bias"] == 1.0).all()
