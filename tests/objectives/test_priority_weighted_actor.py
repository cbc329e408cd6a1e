"""As TorchRL, prioritized-replay weights also weigh the actor (and SAC's temperature) losses."""

from __future__ import annotations

import pytest
import torch

from tdrl.objectives import CQLLoss, DDPGLoss, DiscreteSACLoss, REDQLoss, SACLoss, TD3Loss
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_tanh_normal_actor,
    make_transition_batch,
)

N = 4


def _losses():
    torch.manual_seed(0)
    return {
        "ddpg": (DDPGLoss(make_deterministic_actor(), make_qvalue_critic()), "continuous"),
        "td3": (TD3Loss(make_deterministic_actor(), make_qvalue_critic()), "continuous"),
        "sac": (
            SACLoss(
                make_tanh_normal_actor(), make_qvalue_critic(), target_entropy=-2.0, alpha_init=2.0
            ),
            "continuous",
        ),
        "discrete_sac": (
            DiscreteSACLoss(
                make_categorical_actor(),
                make_action_value_net(),
                num_actions=2,
                action_space="one_hot",
                alpha_init=2.0,  # log_alpha != 0: a non-zero temperature loss
            ),
            "one_hot",
        ),
    }


def _weighted(loss, batch, weights, key):
    batch = batch.clone()
    batch["priority_weight"] = weights
    torch.manual_seed(1)  # same policy samples in every call
    return loss(batch)[key].detach()


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("ddpg", "loss_actor"),
        ("td3", "loss_actor"),
        ("sac", "loss_actor"),
        ("sac", "loss_alpha"),
        ("discrete_sac", "loss_actor"),
        ("discrete_sac", "loss_alpha"),
    ],
)
def test_actor_terms_are_the_weighted_mean_of_the_samples(name, key):
    loss, action = _losses()[name]
    torch.manual_seed(2)
    batch = make_transition_batch(batch=(N,), action=action)
    # The term of sample i alone: weight one on i, zero elsewhere.
    per_sample = torch.stack([_weighted(loss, batch, torch.eye(N)[i], key) for i in range(N)])
    assert per_sample.unique().numel() > 1  # the weights select different samples
    weights = torch.tensor([0.5, 2.0, 1.0, 0.25])
    expected = (weights * per_sample).sum() / weights.sum()
    torch.testing.assert_close(_weighted(loss, batch, weights, key), expected)


@pytest.mark.parametrize("cls", [CQLLoss, REDQLoss])
def test_redq_and_cql_actor_terms_ignore_the_weights(cls):
    # TorchRL's REDQ and CQL do not use priority weights.
    torch.manual_seed(0)
    loss = cls(make_tanh_normal_actor(), make_qvalue_critic(), target_entropy=-2.0)
    batch = make_transition_batch(batch=(N,), bound=0.9)
    plain = _weighted(loss, batch, torch.ones(N), "loss_actor")
    torch.testing.assert_close(_weighted(loss, batch, torch.eye(N)[0], "loss_actor"), plain)
