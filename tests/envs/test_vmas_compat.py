"""VmasWrapper/VmasEnv as TorchRL users call them: signatures, argument routing, default group
maps, attributes, errors, and the data flow of TorchRL's multi-agent PPO tutorial."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch

from tdrl.envs import RewardSum, TransformedEnv, check_env_specs
from tdrl.envs.libs import VmasEnv, VmasWrapper
from tdrl.envs.libs._vmas_groups import vmas_group_map

vmas = pytest.importorskip("vmas")

EMPTY = inspect.Parameter.empty
# Recorded from torchrl 0.14.1: (name, kind, default) of each __init__ parameter after self.
TORCHRL_SIGNATURES = {
    VmasWrapper: [
        ("env", "POSITIONAL_OR_KEYWORD", None),
        ("categorical_actions", "POSITIONAL_OR_KEYWORD", True),
        ("group_map", "POSITIONAL_OR_KEYWORD", None),
        ("kwargs", "VAR_KEYWORD", EMPTY),
    ],
    VmasEnv: [
        ("scenario", "POSITIONAL_OR_KEYWORD", EMPTY),
        ("num_envs", "KEYWORD_ONLY", EMPTY),
        ("continuous_actions", "KEYWORD_ONLY", True),
        ("max_steps", "KEYWORD_ONLY", None),
        ("categorical_actions", "KEYWORD_ONLY", True),
        ("seed", "KEYWORD_ONLY", None),
        ("group_map", "KEYWORD_ONLY", None),
        ("scenario_kwargs", "KEYWORD_ONLY", None),
        ("kwargs", "VAR_KEYWORD", EMPTY),
    ],
}


@pytest.mark.parametrize("cls", [VmasWrapper, VmasEnv], ids=lambda c: c.__name__)
def test_signature_is_torchrls(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    got = [(p.name, p.kind.name, p.default) for p in params]
    assert got == TORCHRL_SIGNATURES[cls]


# Agent names -> the group map torchrl 0.14.1's VmasEnv chose for them.
TORCHRL_GROUP_MAPS = [
    (["agent_0", "agent_1"], {"agents": ["agent_0", "agent_1"]}),
    (["robot_0", "robot_1"], {"robot": ["robot_0", "robot_1"]}),
    (["agent_0", "robot_0"], {"agent": ["agent_0"], "robot": ["robot_0"]}),
    (["alice", "bob_0"], {"agents": ["alice", "bob_0"]}),
    (["agent", "agent_1"], {"agents": ["agent", "agent_1"]}),
    (["x_1a", "x_2"], {"agents": ["x_1a", "x_2"]}),
    (
        ["agent_blue_0", "agent_red_0"],
        {"agent_blue": ["agent_blue_0"], "agent_red": ["agent_red_0"]},
    ),
    (
        ["lead_adversary_0", "adversary_1", "agent_0"],
        {
            "lead_adversary": ["lead_adversary_0"],
            "adversary": ["adversary_1"],
            "agent": ["agent_0"],
        },
    ),
]


@pytest.mark.parametrize(("names", "expected"), TORCHRL_GROUP_MAPS)
def test_default_group_map_follows_torchrl(names, expected):
    assert vmas_group_map(names) == expected


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (
            "simple_tag",
            {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]},
        ),
        ("simple_speaker_listener", {"speaker": ["speaker_0"], "listener": ["listener_0"]}),
        ("balance", {"agents": ["agent_0", "agent_1", "agent_2"]}),
    ],
)
def test_default_group_map_of_scenarios(scenario, expected):
    assert VmasEnv(scenario, num_envs=1).group_map == expected


def test_spec_layout_is_torchrls():
    env = VmasEnv("navigation", num_envs=2, n_agents=3, collisions=False)
    assert env.batch_size == (2,)
    assert env.action_keys == [("agents", "action")] and env.reward_keys == [("agents", "reward")]
    assert env.reset_keys == ["_reset"]
    assert env.done_keys == ["done", "terminated", "truncated"]
    assert env.full_done_spec["done"].shape == (2, 1)
    action = env.full_action_spec["agents", "action"]
    assert type(action).__name__ == "Bounded" and action.shape == (2, 3, 2)
    assert torch.equal(action.space.low, -torch.ones(2, 3, 2))
    assert env.full_reward_spec["agents", "reward"].shape == (2, 3, 1)
    assert env.full_observation_spec["agents", "info", "pos_rew"].shape == (2, 3, 1)
    td = env.reset()
    assert set(td.keys(True, True)) == {
        ("agents", "observation"),
        ("agents", "info", "pos_rew"),
        ("agents", "info", "final_rew"),
        ("agents", "info", "agent_collisions"),
        "done",
        "terminated",
        "truncated",
    }


def test_torchrl_attributes():
    env = VmasEnv("simple_adversary", num_envs=2)
    assert env.scenario_name == "simple_adversary" and env.num_envs == 2 and env.n_agents == 3
    assert env.agent_names == ["adversary_0", "agent_0", "agent_1"]
    assert env.agent_names_to_indices_map == {"adversary_0": 0, "agent_0": 1, "agent_1": 2}
    assert env.het_specs is False and env.het_specs_map == {"adversary": False, "agent": False}
    assert env.categorical_actions and env.continuous_actions and env.max_steps is None
    assert env.scenario is env.env.scenario and env.lib is vmas and env.libname == "vmas"
    assert "navigation" in VmasEnv.available_envs and "simple_tag" in env.available_envs


def test_scenario_options_as_keywords_or_scenario_kwargs():
    assert VmasEnv("navigation", num_envs=1, n_agents=2).n_agents == 2
    assert VmasEnv("navigation", num_envs=1, scenario_kwargs={"n_agents": 3}).n_agents == 3
    with pytest.raises(ValueError, match=r"given twice \(got \['n_agents'\]"):
        VmasEnv("navigation", num_envs=1, n_agents=2, scenario_kwargs={"n_agents": 3})


def test_vmas_options_reach_make_env():
    env = VmasEnv("navigation", num_envs=2, clamp_actions=True, collisions=False)
    td = env.reset().set(("agents", "action"), torch.full((2, 4, 2), 5.0))
    env.step(td)  # clamped by VMAS
    strict = VmasEnv("navigation", num_envs=2, collisions=False)
    td = strict.reset().set(("agents", "action"), torch.full((2, 4, 2), 5.0))
    with pytest.raises(ValueError, match=r"agent 'agent_0' \(env 0\).*clamp_actions=True"):
        strict.step(td)
    strict.rand_step(strict.reset())  # still usable
    assert VmasEnv("navigation", num_envs=1, grad_enabled=True).env.grad_enabled


def test_wrapper_checks_its_arguments():
    raw = vmas.make_env("navigation", num_envs=2, collisions=False)
    with pytest.raises(TypeError, match="expected a VMAS env"):
        VmasWrapper()
    with pytest.raises(ValueError, match=r"batch_size differs .*got \(3,\)"):
        VmasWrapper(raw, batch_size=[3])
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \(got \['n_agents'\]"):
        VmasWrapper(raw, n_agents=3)
    with pytest.raises(ValueError, match="from_pixels=True is not supported"):
        VmasWrapper(raw, from_pixels=True)
    env = VmasWrapper(raw, batch_size=[2], device="cpu", from_pixels=False, validate=True)
    assert env.device == torch.device("cpu") and env.validate


def test_env_checks_its_arguments():
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        VmasEnv("navigation", num_envs=0)
    with pytest.raises(ValueError, match=r"VMAS refused to build the scenario.*not found"):
        VmasEnv("no_such_scenario", num_envs=1)


def test_bad_group_maps_are_refused():
    raw = vmas.make_env("navigation", num_envs=1, n_agents=2, collisions=False)
    with pytest.raises(ValueError, match=r"\['agent_1'\] are in no group"):
        VmasWrapper(raw, group_map={"a": ["agent_0"]})
    with pytest.raises(ValueError, match="reserved"):
        VmasWrapper(raw, group_map={"done": ["agent_0", "agent_1"]})
    with pytest.raises(TypeError, match="must map group names"):
        VmasWrapper(raw, group_map=["agent_0", "agent_1"])


def test_missing_vmas_names_the_extra(monkeypatch):
    raw = vmas.make_env("navigation", num_envs=1, collisions=False)
    monkeypatch.setitem(sys.modules, "vmas", None)
    with pytest.raises(ImportError, match=r"pip install tdrl\[vmas\]"):
        VmasWrapper(raw)


def test_multiagent_ppo_tutorial_flow():
    from tensordict.nn import TensorDictModule
    from tensordict.nn.distributions import NormalParamExtractor

    from tdrl.collectors import Collector
    from tdrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
    from tdrl.objectives import ClipPPOLoss, ValueEstimators

    torch.manual_seed(0)
    env = VmasEnv(
        scenario="navigation",
        num_envs=4,
        continuous_actions=True,
        max_steps=5,
        device="cpu",
        n_agents=3,
        collisions=False,
    )
    env = TransformedEnv(
        env, RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")])
    )
    check_env_specs(env)
    n_obs = env.observation_spec["agents", "observation"].shape[-1]
    spec = env.full_action_spec_unbatched[env.action_key]
    net = torch.nn.Sequential(
        MultiAgentMLP(n_obs, 2 * spec.shape[-1], n_agents=3, centralized=False, share_params=True),
        NormalParamExtractor(),
    )
    policy = ProbabilisticActor(
        TensorDictModule(
            net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
        ),
        spec=env.full_action_spec_unbatched,
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[env.action_key],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
        return_log_prob=True,
    )
    critic = TensorDictModule(
        MultiAgentMLP(n_obs, 1, n_agents=3, centralized=True, share_params=True),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "state_value")],
    )
    collector = Collector(env, policy, frames_per_batch=40, total_frames=40)
    data = next(iter(collector))
    collector.shutdown()
    assert data["next", "done"].any()  # the horizon of 5 steps was reached inside the batch
    for key in ("done", "terminated"):
        shape = data.get_item_shape(("next", env.reward_key))
        data.set(("next", "agents", key), data.get(("next", key)).unsqueeze(-1).expand(shape))
    loss = ClipPPOLoss(policy, critic)
    loss.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.9)
    with torch.no_grad():
        loss.value_estimator(data)
    values = loss(data.reshape(-1))
    total = values["loss_objective"] + values["loss_critic"] + values["loss_entropy"]
    total.backward()
    assert torch.isfinite(total)


@pytest.mark.parametrize(
    ("kwargs", "value", "got", "rule"),
    [
        ({"continuous_actions": True}, 3.0, r"\[3.0, 0.0\]", r"values in \[-1.0, 1.0\]"),
        ({"continuous_actions": False}, 9, "9", r"an index in \[0, 8\]"),
        ({"continuous_actions": False}, -1, "-1", r"an index in \[0, 8\]"),
    ],
    ids=["box", "index-high", "index-negative"],
)
def test_actions_outside_the_spec_name_the_key_agent_and_value(kwargs, value, got, rule):
    env = VmasEnv("navigation", num_envs=2, n_agents=2, **kwargs)
    td = env.reset()
    action = env.full_action_spec["agents", "action"].zero()
    action[1, 1].view(-1)[0] = value
    with pytest.raises(
        ValueError,
        match=rf"agent 'agent_1' \(env 1\) is outside the action spec \(got {got}.*"
        rf"at key \('agents', 'action'\); expected {rule}",
    ):
        env.step(td.set(("agents", "action"), action))
    env.rand_step(env.reset())  # still usable
