"""MultiAgentGAE: team-shared signals broadcast along the agent dim, per-agent standardisation."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.objectives import MultiAgentGAE as RootMultiAgentGAE
from tdrl.objectives import ValueEstimators
from tdrl.objectives.value import GAE, MultiAgentGAE
from tdrl.objectives.value.advantages import MultiAgentGAE as AdvantagesMultiAgentGAE

VALUE = ("agents", "state_value")


def make_batch() -> TensorDict:
    """``[2, 5]`` steps of 3 agents; env 0 terminates at t=2, env 1 is truncated at t=4.

    The same construction (same generator order) produced the TorchRL reference numbers below.
    """
    g = torch.Generator().manual_seed(0)
    b, t, n = 2, 5, 3
    done = torch.zeros(b, t, 1, dtype=torch.bool)
    done[0, 2] = True
    done[1, 4] = True
    terminated = torch.zeros(b, t, 1, dtype=torch.bool)
    terminated[0, 2] = True
    return TensorDict(
        {
            "agents": {"state_value": torch.randn(b, t, n, 1, generator=g)},
            "task": torch.tensor([[0] * t, [1] * t]),
            "next": {
                "agents": {
                    "state_value": torch.randn(b, t, n, 1, generator=g),
                    "reward": torch.randn(b, t, n, 1, generator=g),
                },
                "reward": torch.randn(b, t, 1, generator=g),
                "done": done,
                "terminated": terminated,
                "truncated": done & ~terminated,
            },
        },
        batch_size=[b, t],
    )


# TorchRL 0.14.1's torchrl.objectives.value.MultiAgentGAE(gamma=0.9, lmbda=0.8,
# value_network=None, **options).set_keys(value=("agents", "state_value")) on make_batch():
# advantage[1, :, :, 0] (env 1, every step and agent), rounded to 4 decimals.
TORCHRL_ADVANTAGE_ENV1 = {
    "team": [
        [1.5117, -0.035, 0.3732],
        [2.552, 0.6759, 0.8799],
        [3.0141, 0.4622, 2.9179],
        [3.444, -0.4855, -0.2932],
        [3.0169, -1.2193, -1.3499],
    ],
    "per_agent": [
        [-0.0728, -0.8604, -2.3656],
        [1.9161, -0.8107, -2.2101],
        [1.2492, -0.6258, -0.184],
        [2.4718, -1.7612, -2.2926],
        [2.2641, -2.2937, -2.2306],
    ],
    "team_avg": [
        [-0.4875, -0.4901, 0.4694],
        [0.4151, 0.0789, 0.8164],
        [0.816, -0.0921, 2.2118],
        [1.1889, -0.8506, 0.0131],
        [0.8184, -1.4378, -0.7105],
    ],
    "team_avg_groups": [
        [-1.6178, 0.112, -0.0835],
        [-0.2106, 1.0452, 0.2361],
        [0.4144, 0.7646, 1.5213],
        [0.9959, -0.4793, -0.5037],
        [0.4181, -1.4425, -1.1701],
    ],
    "team_auto_reset": [
        [0.9675, 0.5466, 0.9421],
        [1.7962, 1.4837, 1.67],
        [1.9643, 1.5841, 4.0152],
        [1.9859, 1.0727, 1.2309],
        [0.9919, 0.9448, 0.7669],
    ],
}
# Same source, "team" case: value_target[0, :, :, 0] (env 0 terminates at t=2: every agent's
# target there is the team reward).
TORCHRL_VALUE_TARGET_ENV0 = [
    [1.5047, 1.2278, -1.5374],
    [-0.4119, 1.0478, -1.497],
    [0.3014, 0.3014, 0.3014],
    [1.4406, -0.0774, -0.9512],
    [1.3434, 3.044, -1.0385],
]

CASES = {
    "team": ({}, {}),
    "per_agent": ({"reward": ("agents", "reward")}, {}),
    "team_avg": ({}, {"average_gae": True}),
    "team_avg_groups": ({}, {"average_gae": True, "group_key": "task"}),
    "team_auto_reset": ({}, {"auto_reset_env": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torchrl(case):
    keys, options = CASES[case]
    td = make_batch()
    est = MultiAgentGAE(gamma=0.9, lmbda=0.8, **options).set_keys(value=VALUE, **keys)
    est(td)
    assert td["advantage"].shape == td["value_target"].shape == (2, 5, 3, 1)
    expected = torch.tensor(TORCHRL_ADVANTAGE_ENV1[case])
    torch.testing.assert_close(td["advantage"][1, ..., 0], expected, atol=1e-4, rtol=0)
    if case == "team":
        expected = torch.tensor(TORCHRL_VALUE_TARGET_ENV0)
        torch.testing.assert_close(td["value_target"][0, ..., 0], expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("vectorized", [True, False])
def test_team_signals_equal_gae_on_expanded_signals(vectorized):
    # Plain reference: GAE on the same data with the team reward/done copied to every agent.
    td = make_batch()
    expanded = td.clone()
    for key in ("reward", "done", "terminated"):
        expanded["next", "agents", key] = td["next", key].unsqueeze(-2).expand(2, 5, 3, 1)
    ma = MultiAgentGAE(gamma=0.9, lmbda=0.8, vectorized=vectorized).set_keys(value=VALUE)
    plain = GAE(gamma=0.9, lmbda=0.8, vectorized=vectorized).set_keys(
        value=VALUE,
        reward=("agents", "reward"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    torch.testing.assert_close(ma(td)["advantage"], plain(expanded)["advantage"])
    torch.testing.assert_close(td["value_target"], expanded["value_target"])


def test_average_gae_standardises_each_agent():
    td = make_batch()
    MultiAgentGAE(gamma=0.9, lmbda=0.8, average_gae=True).set_keys(value=VALUE)(td)
    adv = td["advantage"]
    torch.testing.assert_close(adv.mean(dim=(0, 1, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(adv.std(dim=(0, 1, 3)), torch.ones(3))


def test_agent_dim_other_than_minus_two():
    # Values laid out [B, T, n_agents] (no trailing feature dim): the agents are dim -1.
    td = make_batch()
    td["agents", "state_value"] = td["agents", "state_value"].squeeze(-1)
    td["next", "agents", "state_value"] = td["next", "agents", "state_value"].squeeze(-1)
    for key in ("reward", "done", "terminated"):
        td["next", key] = td["next", key].squeeze(-1)
    MultiAgentGAE(gamma=0.9, lmbda=0.8, agent_dim=-1).set_keys(value=VALUE)(td)
    expected = torch.tensor(TORCHRL_ADVANTAGE_ENV1["team"])
    torch.testing.assert_close(td["advantage"][1], expected, atol=1e-4, rtol=0)


def test_value_network_and_value_estimate():
    td = make_batch()
    td["agents", "observation"] = torch.randn(2, 5, 3, 4)
    td["next", "agents", "observation"] = torch.randn(2, 5, 3, 4)
    critic = TensorDictModule(
        torch.nn.Linear(4, 1), in_keys=[("agents", "observation")], out_keys=[VALUE]
    )
    est = MultiAgentGAE(gamma=0.9, lmbda=0.8, value_network=critic).set_keys(value=VALUE)
    target = est.value_estimate(td.clone())
    est(td)
    assert target.shape == (2, 5, 3, 1)
    torch.testing.assert_close(target, td["value_target"])
    torch.testing.assert_close(td["advantage"] + td["agents", "state_value"], target)


def test_names_and_defaults():
    assert RootMultiAgentGAE is MultiAgentGAE is AdvantagesMultiAgentGAE
    assert ValueEstimators.MAGAE.name == "MAGAE"
    est = MultiAgentGAE(gamma=0.99, lmbda=0.95)
    assert est.agent_dim == -2 and est.average_gae is False


def test_reward_with_too_few_dims_raises():
    td = make_batch()
    td["next", "reward"] = td["next", "reward"][..., 0]  # [2, 5]: two dims fewer than the values
    est = MultiAgentGAE(gamma=0.9, lmbda=0.8).set_keys(value=VALUE)
    with pytest.raises(ValueError, match=r"MultiAgentGAE.forward: \('next', 'reward'\)"):
        est(td)


def test_bad_agent_dim_raises():
    with pytest.raises(TypeError, match="agent_dim must be an int"):
        MultiAgentGAE(gamma=0.9, lmbda=0.8, agent_dim="agents")


@pytest.mark.parametrize("per_agent", [False, True])
def test_steps_to_next_obs_discount_is_broadcast_to_the_agents(per_agent):
    # Plain reference: GAE with every team signal and the step counts copied to each agent.
    # (TorchRL 0.14.1's MultiAgentGAE raises a shape error on this entry.)
    td = make_batch()
    td["steps_to_next_obs"] = torch.tensor([[1, 2, 1, 3, 1], [2, 2, 1, 1, 3]]).unsqueeze(-1)
    expanded = td.clone()
    for key in ("done", "terminated"):
        expanded["next", "agents", key] = td["next", key].unsqueeze(-2).expand(2, 5, 3, 1)
    if not per_agent:
        expanded["next", "agents", "reward"] = td["next", "reward"].unsqueeze(-2).expand(2, 5, 3, 1)
    expanded["agents", "steps"] = td["steps_to_next_obs"].unsqueeze(-2).expand(2, 5, 3, 1)
    ma = MultiAgentGAE(gamma=0.9, lmbda=0.8).set_keys(value=VALUE)
    if per_agent:
        ma.set_keys(reward=("agents", "reward"))
    plain = GAE(gamma=0.9, lmbda=0.8).set_keys(
        value=VALUE,
        reward=("agents", "reward"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
        steps_to_next_obs=("agents", "steps"),
    )
    torch.testing.assert_close(ma(td)["advantage"], plain(expanded)["advantage"])
    without_steps = MultiAgentGAE(gamma=0.9, lmbda=0.8).set_keys(value=VALUE)
    if per_agent:
        without_steps.set_keys(reward=("agents", "reward"))
    assert not torch.allclose(without_steps(make_batch())["advantage"], td["advantage"])
