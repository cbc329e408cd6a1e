"""TorchRL's estimator keys (steps_to_next_obs, sample_log_prob) and value_estimate(**kwargs)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueKeys,
    functional,
)

GAMMA, LMBDA = 0.9, 0.8


def _traj(steps_key: str | None = "steps_to_next_obs") -> TensorDict:
    g = torch.Generator().manual_seed(3)
    done = torch.zeros(2, 4, 1, dtype=torch.bool)
    done[0, 1] = True
    td = TensorDict(
        {
            "state_value": torch.randn(2, 4, 1, generator=g),
            "next": {
                "state_value": torch.randn(2, 4, 1, generator=g),
                "reward": torch.randn(2, 4, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        [2, 4],
    )
    if steps_key is not None:
        td[steps_key] = torch.tensor([[1, 2, 3, 1], [3, 3, 2, 1]]).unsqueeze(-1)
    return td


def test_value_keys_hold_torchrl_names_and_defaults() -> None:
    keys = ValueKeys()
    assert keys.steps_to_next_obs == "steps_to_next_obs"
    assert keys.sample_log_prob == "action_log_prob"  # TorchRL's default (no composite lp)
    est = GAE(gamma=GAMMA, lmbda=LMBDA).set_keys(
        steps_to_next_obs=("agents", "n"), sample_log_prob="sample_log_prob"
    )
    assert est.tensor_keys.steps_to_next_obs == ("agents", "n")
    assert est.tensor_keys.sample_log_prob == "sample_log_prob"
    assert {f.name for f in dataclasses.fields(ValueKeys)} >= {
        "advantage",
        "value_target",
        "value",
        "reward",
        "done",
        "terminated",
        "steps_to_next_obs",
        "sample_log_prob",
    }


def test_td0_discounts_with_gamma_to_the_steps_to_next_obs() -> None:
    td = _traj()
    nxt = td["next"]
    gamma = GAMMA ** td["steps_to_next_obs"].float()
    expected = nxt["reward"] + gamma * nxt["state_value"] * (~nxt["terminated"]).float()
    out = TD0Estimator(gamma=GAMMA)(td.clone())
    torch.testing.assert_close(out["value_target"], expected)
    torch.testing.assert_close(out["advantage"], expected - td["state_value"])
    # without the entry: the plain gamma
    plain = TD0Estimator(gamma=GAMMA)(_traj(None))["value_target"]
    torch.testing.assert_close(
        plain, nxt["reward"] + GAMMA * nxt["state_value"] * (~nxt["terminated"]).float()
    )


@pytest.mark.parametrize("cls", ["TD1", "TDLambda", "GAE"])
def test_multistep_estimators_use_the_per_step_gamma(cls: str) -> None:
    td = _traj()
    nxt = td["next"]
    gamma = GAMMA ** td["steps_to_next_obs"].float()
    args = (nxt["state_value"], nxt["reward"], nxt["done"], nxt["terminated"])
    if cls == "TD1":
        est, expected = TD1Estimator(gamma=GAMMA), functional.td1_return_estimate(gamma, *args)
    elif cls == "TDLambda":
        est = TDLambdaEstimator(gamma=GAMMA, lmbda=LMBDA)
        expected = functional.td_lambda_return_estimate(gamma, LMBDA, *args)
    else:
        est = GAE(gamma=GAMMA, lmbda=LMBDA)
        _, expected = functional.generalized_advantage_estimate(
            gamma, LMBDA, td["state_value"], *args
        )
    torch.testing.assert_close(est(td.clone())["value_target"], expected)
    torch.testing.assert_close(est.value_estimate(td.clone()), expected)


def test_set_keys_moves_the_steps_entry() -> None:
    td = _traj("n")
    est = TD0Estimator(gamma=GAMMA)
    unaware = est.value_estimate(td.clone())
    torch.testing.assert_close(unaware, TD0Estimator(gamma=GAMMA).value_estimate(_traj(None)))
    aware = est.set_keys(steps_to_next_obs="n").value_estimate(td.clone())
    torch.testing.assert_close(aware, TD0Estimator(gamma=GAMMA).value_estimate(_traj()))
    assert not torch.allclose(aware, unaware)


class _Scaled(nn.Module):
    def forward(self, obs: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return obs.sum(-1, keepdim=True) * scale


def _obs_traj() -> TensorDict:
    td = _traj(None).exclude("state_value", ("next", "state_value"))
    g = torch.Generator().manual_seed(4)
    td["obs"] = torch.randn(2, 4, 3, generator=g)
    td["next", "obs"] = torch.randn(2, 4, 3, generator=g)
    return td


@pytest.mark.parametrize("cls", ["TD0", "TD1", "TDLambda", "GAE"])
def test_value_estimate_passes_kwargs_to_the_value_network(cls: str) -> None:
    net = TensorDictModule(_Scaled(), in_keys=["obs"], out_keys=["state_value"])
    make = {
        "TD0": lambda: TD0Estimator(gamma=GAMMA, value_network=net),
        "TD1": lambda: TD1Estimator(gamma=GAMMA, value_network=net),
        "TDLambda": lambda: TDLambdaEstimator(gamma=GAMMA, lmbda=LMBDA, value_network=net),
        "GAE": lambda: GAE(gamma=GAMMA, lmbda=LMBDA, value_network=net),
    }[cls]
    td = _obs_traj()
    scaled = make().value_estimate(td.clone(), scale=2.0)
    plain = make().value_estimate(td.clone())
    given = td.clone()  # the values the scaled network gives, handed to a network-less estimator
    given["state_value"] = 2.0 * td["obs"].sum(-1, keepdim=True)
    given["next", "state_value"] = 2.0 * td["next", "obs"].sum(-1, keepdim=True)
    est = make()
    est.value_network = None
    torch.testing.assert_close(scaled, est.value_estimate(given))
    assert not torch.allclose(scaled, plain)


def test_losses_discount_with_the_steps_to_next_obs() -> None:
    # TorchRL's losses hand their batch (with an n-step transform's entry) to value_estimate
    from tdrl.objectives import DQNLoss
    from tdrl.testing import make_action_value_net, make_transition_batch

    torch.manual_seed(0)
    net = make_action_value_net()
    loss = DQNLoss(net, action_space="categorical", delay_value=False)
    loss.make_value_estimator(gamma=GAMMA)
    batch = make_transition_batch(batch=(6,), action="index")
    batch["steps_to_next_obs"] = torch.tensor([1, 2, 3, 3, 2, 1]).unsqueeze(-1)
    loss(batch)
    q = net.module(batch["observation"]).gather(-1, batch["action"].unsqueeze(-1))
    with torch.no_grad():
        next_q = net.module(batch["next", "observation"]).max(-1, keepdim=True).values
    gamma = GAMMA ** batch["steps_to_next_obs"].float()
    target = batch["next", "reward"] + gamma * (~batch["next", "terminated"]).float() * next_q
    torch.testing.assert_close(batch["td_error"], (q - target).detach().pow(2))
