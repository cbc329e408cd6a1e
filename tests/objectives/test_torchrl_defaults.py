"""TorchRL 0.14.1's defaults, output keys and semantics, derived from its documented behaviour."""

import math

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential

from tdrl.modules import LSTMModule
from tdrl.objectives import (
    A2CLoss,
    ClipPPOLoss,
    CQLLoss,
    DDPGLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    DQNLoss,
    IQLLoss,
    KLPENPPOLoss,
    PPOLoss,
    REDQLoss,
    ReinforceLoss,
    SACLoss,
    TD3Loss,
    distance_loss,
)
from tdrl.objectives.value import GAE, TD0Estimator
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
)


def test_l2_is_the_full_squared_error():
    # torch.nn.functional.mse_loss(reduction="none"): (a - b)^2, no 0.5 factor.
    got = distance_loss(torch.tensor([3.0]), torch.tensor([1.0]), "l2")
    assert got.item() == 4.0


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: DQNLoss(make_action_value_net()), "l2"),
        (lambda: DDPGLoss(make_deterministic_actor(), make_qvalue_critic()), "l2"),
        (lambda: TD3Loss(make_deterministic_actor(), make_qvalue_critic()), "smooth_l1"),
        (lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic()), "smooth_l1"),
        (
            lambda: DiscreteSACLoss(
                make_categorical_actor(), make_action_value_net(), num_actions=2
            ),
            "smooth_l1",
        ),
        (lambda: REDQLoss(make_tanh_normal_actor(), make_qvalue_critic()), "smooth_l1"),
        (lambda: CQLLoss(make_tanh_normal_actor(), make_qvalue_critic()), "smooth_l1"),
        (lambda: DiscreteCQLLoss(make_action_value_net()), "l2"),
        (
            lambda: IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net()),
            "smooth_l1",
        ),
        (
            lambda: DiscreteIQLLoss(
                make_categorical_actor(), make_action_value_net(), make_state_value_net()
            ).set_keys(state_action_value="action_value"),
            "smooth_l1",
        ),
    ],
)
def test_loss_function_defaults(make, expected):
    assert make().loss_function == expected


def test_iql_temperature_and_expectile_defaults():
    loss = IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net())
    assert (loss.temperature, loss.expectile) == (1.0, 0.5)
    discrete = DiscreteIQLLoss(
        make_categorical_actor(), make_action_value_net(), make_state_value_net()
    ).set_keys(state_action_value="action_value")
    assert (discrete.temperature, discrete.expectile) == (1.0, 0.5)


def test_redq_alpha_is_kept_in_0_1_and_10():
    loss = REDQLoss(make_tanh_normal_actor(), make_qvalue_critic())
    batch = make_transition_batch(batch=(4,))
    with torch.no_grad():
        loss.log_alpha.fill_(math.log(1000.0))
    assert loss(batch)["alpha"].item() == pytest.approx(10.0)
    with torch.no_grad():
        loss.log_alpha.fill_(math.log(1e-4))
    assert loss(batch)["alpha"].item() == pytest.approx(0.1)


def test_on_policy_coefficients_and_estimators():
    actor, critic = make_categorical_actor(), make_state_value_net()
    for loss in (A2CLoss(actor, critic), ClipPPOLoss(actor, critic), PPOLoss(actor, critic)):
        assert (loss.entropy_coeff, loss.critic_coeff) == (0.01, 1.0)
        assert isinstance(loss.value_estimator, GAE)
    reinforce = ReinforceLoss(actor, critic)
    assert isinstance(reinforce.value_estimator, GAE)  # TorchRL's default, not TD1
    assert not reinforce.entropy_bonus
    assert isinstance(DQNLoss(make_action_value_net()).value_estimator, TD0Estimator)


def _keys(out):
    return sorted(k for k in out.keys() if k.startswith("loss"))


def test_output_keys_are_torchrl_ones():
    discrete = make_transition_batch(batch=(4,), action="one_hot")
    assert _keys(DQNLoss(make_action_value_net())(discrete)) == ["loss"]
    assert _keys(DiscreteCQLLoss(make_action_value_net())(discrete)) == ["loss_cql", "loss_qvalue"]
    batch = make_transition_batch(batch=(2, 5), action="one_hot")
    reinforce = ReinforceLoss(make_categorical_actor(), make_state_value_net())
    assert sorted(reinforce(batch).keys()) == ["loss_actor", "loss_value"]
    ddpg = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())(
        make_transition_batch(batch=(4,))
    )
    assert {"pred_value_max", "target_value_max"} <= set(ddpg.keys())
    td3 = TD3Loss(make_deterministic_actor(), make_qvalue_critic())(
        make_transition_batch(batch=(4,))
    )
    assert {"next_state_value", "state_action_value_actor"} <= set(td3.keys())


def test_discrete_cql_halves_its_bellman_term():
    torch.manual_seed(0)
    net = make_action_value_net()
    batch = make_transition_batch(batch=(6,), action="one_hot")
    dqn = DQNLoss(net, delay_value=False)(batch)["loss"]
    cql = DiscreteCQLLoss(net, delay_value=False)(batch)["loss_qvalue"]
    torch.testing.assert_close(cql, 0.5 * dqn)


def test_dqn_weights_by_priority_weight():
    torch.manual_seed(0)
    net = make_action_value_net()
    batch = make_transition_batch(batch=(6,), action="one_hot")
    loss = DQNLoss(net, delay_value=False)
    loss.make_value_estimator(gamma=0.9)
    weights = torch.rand(6) + 0.1
    weighted = batch.clone()
    weighted["priority_weight"] = weights
    q_all = net.module(batch["observation"])
    q = (q_all * batch["action"]).sum(-1)
    with torch.no_grad():
        nxt = net.module(batch["next", "observation"]).max(-1).values
    not_term = (~batch["next", "terminated"]).float().squeeze(-1)
    y = batch["next", "reward"].squeeze(-1) + 0.9 * not_term * nxt
    ref = (weights * (q - y).pow(2)).sum() / weights.sum()
    torch.testing.assert_close(loss(weighted)["loss"], ref)
    off = DQNLoss(net, delay_value=False, use_prioritized_weights=False)
    off.make_value_estimator(gamma=0.9)
    torch.testing.assert_close(off(weighted)["loss"], (q - y).pow(2).mean())


class _ModeProbe(torch.nn.Module):
    def __init__(self, lstm):
        super().__init__()
        self.lstm = [lstm]
        self.seen = []

    def forward(self, x):
        self.seen.append(self.lstm[0].recurrent_mode)
        return x


def test_losses_run_recurrent_modules_in_sequence_mode():
    lstm = LSTMModule(3, 4, in_key="observation", out_key="features")
    probe = _ModeProbe(lstm)
    net = TensorDictSequential(
        lstm,
        TensorDictModule(probe, ["features"], ["features"]),
        TensorDictModule(torch.nn.Linear(4, 2), ["features"], ["action_value"]),
    )
    batch = make_transition_batch(batch=(2, 5), action="one_hot")
    batch["is_init"] = torch.zeros(2, 5, 1, dtype=torch.bool)
    batch["recurrent_state_h"] = torch.zeros(2, 5, 1, 4)
    batch["recurrent_state_c"] = torch.zeros(2, 5, 1, 4)
    batch["next"].update(batch.select("is_init", "recurrent_state_h", "recurrent_state_c"))
    loss = DQNLoss(net, delay_value=False, action_space="one_hot")
    loss(batch)
    assert probe.seen and all(probe.seen)
    assert lstm.recurrent_mode is False  # back to step mode after the call


@pytest.mark.parametrize(
    "make",
    [
        lambda: A2CLoss(make_categorical_actor()),
        lambda: KLPENPPOLoss(make_categorical_actor()),
    ],
)
def test_entropy_coeff_weights_the_bonus(make):
    loss = make()
    batch = make_transition_batch(batch=(8,), action="one_hot")
    batch["action_log_prob"] = torch.full((8,), -0.7)
    batch["advantage"] = torch.randn(8, 1)
    batch["logits"] = torch.randn(8, 2)  # the collection-time policy (KL-PEN reads it)
    base = loss(batch)
    scaled = type(loss)(make_categorical_actor(), entropy_coeff=0.5)
    scaled.load_state_dict(loss.state_dict())
    torch.testing.assert_close(scaled(batch)["loss_entropy"], -0.5 * base["entropy"])
