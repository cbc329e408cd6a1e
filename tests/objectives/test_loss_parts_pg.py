"""PPO / A2C / REINFORCE: TorchRL's target_critic_network_params, actor-derived keys, loss_critic."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

from tdrl.modules.distributions import OneHotCategorical
from tdrl.objectives import GAE, A2CLoss, ClipPPOLoss, PPOLoss, ReinforceLoss
from tdrl.testing import make_categorical_actor, make_state_value_net, make_transition_batch

OBS, ACT = 3, 2


def _agents_actor(log_prob_key=None):
    kwargs = {} if log_prob_key is None else {"log_prob_key": log_prob_key}
    return ProbabilisticTensorDictSequential(
        TensorDictModule(
            torch.nn.Linear(OBS, ACT), [("agents", "observation")], [("agents", "logits")]
        ),
        ProbabilisticTensorDictModule(
            {"logits": ("agents", "logits")},
            [("agents", "action")],
            distribution_class=OneHotCategorical,
            return_log_prob=True,
            **kwargs,
        ),
    )


def _agents_batch(actor):
    td = TensorDict({("agents", "observation"): torch.randn(5, 2, OBS)}, [5])
    with torch.no_grad():
        actor(td)
    td.set(("agents", "advantage"), torch.randn(5, 2, 1))
    return td


@pytest.mark.parametrize("cls", [ClipPPOLoss, PPOLoss, A2CLoss])
def test_log_prob_and_action_keys_come_from_the_actor(cls):
    # TorchRL's PPO/A2C read the actor's dist_sample_keys / log_prob_keys at construction.
    actor = _agents_actor()
    loss = cls(actor)
    assert loss.tensor_keys.action == ("agents", "action")
    assert loss.tensor_keys.sample_log_prob == ("agents", "action_log_prob")
    loss.set_keys(advantage=("agents", "advantage"))
    batch = _agents_batch(actor)
    out = loss(batch)
    if cls is A2CLoss:
        return
    # The stored log-prob is the current one: ratio 1, the objective is -mean(advantage).
    expected = -batch["agents", "advantage"].mean()
    torch.testing.assert_close(out["loss_objective"], expected)


def test_custom_log_prob_key_of_the_actor():
    actor = _agents_actor(log_prob_key=("agents", "lp"))
    loss = ClipPPOLoss(actor).set_keys(advantage=("agents", "advantage"))
    assert loss.tensor_keys.sample_log_prob == ("agents", "lp")
    batch = _agents_batch(actor)
    assert ("agents", "action_log_prob") not in batch.keys(True)
    torch.testing.assert_close(loss(batch)["loss_objective"], -batch["agents", "advantage"].mean())


def test_set_keys_wins_over_the_actor_keys():
    loss = ClipPPOLoss(_agents_actor()).set_keys(sample_log_prob="old_lp")
    assert loss.tensor_keys.sample_log_prob == "old_lp"
    assert loss.tensor_keys.action == ("agents", "action")


def test_reinforce_keeps_the_default_keys():
    # TorchRL's ReinforceLoss does not read the actor's keys.
    loss = ReinforceLoss(_agents_actor())
    assert loss.tensor_keys.action == "action"
    assert loss.tensor_keys.sample_log_prob == "action_log_prob"


@pytest.mark.parametrize("cls", [ClipPPOLoss, A2CLoss, ReinforceLoss])
def test_target_critic_network_params_are_the_live_weights_detached(cls):
    critic = make_state_value_net()
    loss = cls(make_categorical_actor(), critic)
    target = loss.target_critic_network_params
    live = loss.critic_network_params
    for key, value in live.items(True, True):
        assert target[key].data_ptr() == value.data_ptr()
        assert not target[key].requires_grad
    with torch.no_grad():
        critic.module[0].bias.add_(1.0)  # same storage: the target follows the live weights
    torch.testing.assert_close(target["module", "0", "bias"], critic.module[0].bias.detach())
    assert isinstance(loss.target_actor_network_params, TensorDict)


def test_gae_with_the_tutorial_params_equals_the_plain_call():
    torch.manual_seed(0)
    critic = make_state_value_net()
    loss = ClipPPOLoss(make_categorical_actor(), critic)
    loss.make_value_estimator(gamma=0.9, lmbda=0.8)
    batch = make_transition_batch(batch=(2, 5), action="one_hot")
    plain = GAE(gamma=0.9, lmbda=0.8, value_network=critic)(batch.clone())
    with torch.no_grad():
        got = loss.value_estimator(
            batch.clone(),
            params=loss.critic_network_params,
            target_params=loss.target_critic_network_params,
        )
    torch.testing.assert_close(got["advantage"], plain["advantage"])
    torch.testing.assert_close(got["value_target"], plain["value_target"])


def _critic_batch(critic, clip_old=None):
    batch = make_transition_batch(batch=(8,), action="one_hot")
    batch["advantage"] = torch.randn(8, 1)
    batch["value_target"] = torch.randn(8, 1)
    batch["action_log_prob"] = torch.full((8,), -0.7)
    if clip_old is not None:
        with torch.no_grad():
            batch["state_value"] = critic(batch.copy())["state_value"] + clip_old
    return batch


@pytest.mark.parametrize("cls", [ClipPPOLoss, A2CLoss, ReinforceLoss])
def test_loss_critic_is_the_per_element_distance_times_critic_coeff(cls):
    torch.manual_seed(0)
    critic = make_state_value_net()
    loss = cls(make_categorical_actor(), critic, critic_coeff=0.5, loss_critic_type="l2")
    batch = _critic_batch(critic)
    parts = loss.loss_critic(batch)
    assert len(parts) == (3 if cls is ClipPPOLoss else 2)  # TorchRL's return tuples
    value = critic(batch.copy())["state_value"]
    expected = 0.5 * (value - batch["value_target"]) ** 2
    torch.testing.assert_close(parts[0], expected)
    assert parts[1] is None  # no clip_value
    key = "loss_value" if cls is ReinforceLoss else "loss_critic"
    torch.testing.assert_close(loss(batch)[key], expected.mean())


def test_loss_critic_explained_variance_follows_the_flag():
    critic = make_state_value_net()
    batch = _critic_batch(critic)
    on = ClipPPOLoss(make_categorical_actor(), critic).loss_critic(batch)[2]
    value = critic(batch.copy())["state_value"]
    target = batch["value_target"]
    # TorchRL's: population variances over the batch dim, one value per value feature ([1]).
    expected = 1 - (target - value).var(0, correction=0) / target.var(0, correction=0)
    assert on.shape == (1,)
    torch.testing.assert_close(on, expected.detach())
    off = ClipPPOLoss(make_categorical_actor(), critic, log_explained_variance=False)
    assert off.loss_critic(batch)[2] is None


def test_value_clipping_reports_the_clip_fraction():
    torch.manual_seed(0)
    critic = make_state_value_net()
    shift = torch.tensor([0.5, -0.5, 0.05, -0.05, 0.5, 0.0, 0.3, -0.3]).unsqueeze(-1)
    batch = _critic_batch(critic, clip_old=shift)  # stored value = value + shift
    loss = ClipPPOLoss(make_categorical_actor(), critic, clip_value=0.1, loss_critic_type="l2")
    _, clip_fraction, _ = loss.loss_critic(batch)
    # |value - old| = |shift| exceeds 0.1 for five of the eight samples.
    torch.testing.assert_close(clip_fraction, torch.tensor(5 / 8))
    torch.testing.assert_close(loss(batch)["value_clip_fraction"], torch.tensor(5 / 8))


@pytest.mark.parametrize("cls", [ClipPPOLoss, A2CLoss])
def test_value_clipping_without_the_stored_value_raises(cls):
    # TorchRL raises; tdrl silently skipped the clipping before.
    critic = make_state_value_net()
    loss = cls(make_categorical_actor(), critic, clip_value=0.1)
    batch = _critic_batch(critic)
    with pytest.raises(KeyError, match=r"clip_value=0\.1 needs the collection-time value"):
        loss(batch)


def test_loss_critic_needs_the_value_target():
    critic = make_state_value_net()
    batch = _critic_batch(critic).exclude("value_target")
    with pytest.raises(KeyError, match=r"the value target .+ is missing"):
        ClipPPOLoss(make_categorical_actor(), critic).loss_critic(batch)
    with pytest.raises(RuntimeError, match="has no critic"):
        ClipPPOLoss(make_categorical_actor()).loss_critic(batch)
