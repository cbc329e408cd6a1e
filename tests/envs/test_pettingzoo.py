"""PettingZooWrapper/PettingZooEnv on parallel envs: layout, raw-API equivalence, options, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from mpe2 import simple_adversary_v3, simple_spread_v3

with warnings.catch_warnings():  # pettingzoo>=1.27 deprecates importing env modules
    warnings.simplefilter("ignore", DeprecationWarning)
    from pettingzoo.classic import rps_v2, tictactoe_v3

from tdrl.envs import MarlGroupMapType, SerialEnv, check_env_specs
from tdrl.envs.libs import PettingZooEnv, PettingZooWrapper
from tdrl.errors import SpecError
from tdrl.specs import Bounded, Categorical, Composite, OneHot, Unbounded


def _spread(**kwargs):
    return simple_spread_v3.parallel_env(N=3, max_cycles=4, **kwargs)


def test_layout_matches_torchrl():
    env = PettingZooWrapper(simple_adversary_v3.parallel_env(), use_mask=True)
    assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    assert env.batch_size == torch.Size([])
    obs = env.full_observation_spec
    assert isinstance(obs["agent", "observation"], Unbounded)
    assert obs["agent", "observation"].shape == (2, 10)
    assert obs["adversary", "observation"].shape == (1, 8)
    assert isinstance(obs["agent", "mask"], Categorical) and obs["agent", "mask"].shape == (2,)
    action = env.full_action_spec["agent", "action"]
    assert isinstance(action, Categorical) and action.shape == (2,) and action.n == 5
    assert env.full_reward_spec["agent", "reward"].shape == (2, 1)
    assert set(env.done_keys) == {
        "done",
        "terminated",
        "truncated",
        *((g, k) for g in ("adversary", "agent") for k in ("done", "terminated", "truncated")),
    }
    assert env.full_done_spec["done"].shape == (1,)
    assert env.full_done_spec["agent", "done"].shape == (2, 1)
    td = env.reset()
    assert td["agent", "observation"].dtype == torch.float32
    assert td["agent", "mask"].all() and td["agent", "done"].shape == (2, 1)


def _compare_step(td, raw, obs, rewards, terms, truncs, group="agent"):
    agents = ["agent_0", "agent_1", "agent_2"]
    nxt = td["next"]
    for i, agent in enumerate(agents):
        np.testing.assert_array_equal(nxt[group, "observation"][i].numpy(), obs[agent])
        assert nxt[group, "reward"][i, 0].item() == np.float32(rewards[agent])
        assert nxt[group, "terminated"][i, 0].item() == terms[agent]
        assert nxt[group, "truncated"][i, 0].item() == truncs[agent]
        assert nxt[group, "mask"][i].item() == (agent in raw.agents)
    np.testing.assert_array_equal(nxt["state"].numpy(), raw.state())
    assert nxt["done"].item() == any(terms[a] or truncs[a] for a in agents)


@pytest.mark.parametrize("continuous", [False, True])
def test_parallel_matches_raw_api(continuous):
    kwargs = {"continuous_actions": continuous}
    env = PettingZooWrapper(_spread(**kwargs), return_state=True, use_mask=True, seed=7)
    raw = _spread(**kwargs)
    rng = np.random.default_rng(0)
    for episode in range(2):
        raw.reset(seed=7 + episode)  # TorchRL's seeding: seed=7 and set_seed reset at once
        obs, _ = raw.reset()
        if episode:
            env.set_seed(7 + episode)
        td = env.reset()
        for i, agent in enumerate(raw.possible_agents):
            np.testing.assert_array_equal(td["agent", "observation"][i].numpy(), obs[agent])
        np.testing.assert_array_equal(td["state"].numpy(), raw.state())
        for _ in range(4):
            if continuous:
                acts = rng.uniform(0, 1, (3, 5)).astype(np.float32)
            else:
                acts = rng.integers(0, 5, 3)
            td["agent", "action"] = torch.as_tensor(acts)
            td = env.step(td)
            obs, rew, term, trunc, _ = raw.step({a: acts[i] for i, a in enumerate(raw.agents)})
            _compare_step(td, raw, obs, rew, term, trunc)
            td = env.step_mdp(td)
        assert td["done"].item() and not raw.agents  # truncated after max_cycles


def test_one_hot_actions_and_discrete_observations():
    env = PettingZooWrapper(rps_v2.parallel_env(), categorical_actions=False, seed=1)
    raw = rps_v2.parallel_env()
    raw.reset(seed=1)
    raw.reset()
    spec = env.full_action_spec["player", "action"]
    assert isinstance(spec, OneHot) and spec.shape == (2, 3) and spec.dtype == torch.int64
    assert isinstance(env.full_observation_spec["player", "observation"], OneHot)
    td = env.reset()
    td["player", "action"] = torch.tensor([[0, 0, 1], [1, 0, 0]])
    obs, rewards, *_ = raw.step({"player_0": 2, "player_1": 0})
    nxt = env.step(td)["next"]
    assert nxt["player", "observation"].argmax(-1).tolist() == [obs["player_0"], obs["player_1"]]
    assert nxt["player", "reward"].flatten().tolist() == [rewards["player_0"], rewards["player_1"]]


def test_group_maps():
    all_in_one = PettingZooWrapper(_spread(), group_map=MarlGroupMapType.ALL_IN_ONE_GROUP)
    assert all_in_one.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
    own = PettingZooWrapper(_spread(), group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    assert own.group_map == {a: [a] for a in ("agent_0", "agent_1", "agent_2")}
    custom = PettingZooWrapper(_spread(), group_map={"b": ["agent_2", "agent_0"], "a": ["agent_1"]})
    assert custom.full_observation_spec["b", "observation"].shape == (2, 18)
    raw = _spread()
    raw.reset(seed=2)
    obs, _ = raw.reset()
    custom.set_seed(2)
    td = custom.reset()  # rows follow the group map's order
    np.testing.assert_array_equal(td["b", "observation"][0].numpy(), obs["agent_2"])
    np.testing.assert_array_equal(td["b", "observation"][1].numpy(), obs["agent_0"])
    check_env_specs(custom)


def test_group_errors():
    with pytest.raises(ValueError, match="are in no group"):
        PettingZooWrapper(_spread(), group_map={"a": ["agent_0"]})
    with pytest.raises(ValueError, match="different observation spaces"):
        PettingZooWrapper(
            simple_adversary_v3.parallel_env(), group_map=MarlGroupMapType.ALL_IN_ONE_GROUP
        )
    with pytest.raises(ValueError, match="named 'state'"):
        PettingZooWrapper(
            _spread(), return_state=True, group_map={"state": ["agent_0", "agent_1", "agent_2"]}
        )


def test_check_env_specs():
    check_env_specs(
        PettingZooWrapper(_spread(), return_state=True, use_mask=True, seed=0),
        break_when_any_done="both",
    )
    check_env_specs(
        PettingZooWrapper(_spread(continuous_actions=True), categorical_actions=False, seed=0)
    )
    env = PettingZooWrapper(_spread(continuous_actions=True))
    assert isinstance(env.full_action_spec["agent", "action"], Bounded)


def _spy_resets(raw):
    """Records the ``seed`` of every ``reset`` the wrapper asks of ``raw``."""
    seeds, reset = [], raw.reset

    def spy(seed=None, options=None):
        seeds.append(seed)
        return reset(seed=seed, options=options)

    raw.reset = spy
    return seeds


def test_seeding_resets_at_once_as_torchrl():
    # TorchRL 0.14.1: the constructor resets once with seed=, set_seed(s) calls env.reset(seed=s)
    # right away (also for None), and later resets pass no seed
    raw = _spread()
    seeds = _spy_resets(raw)
    env = PettingZooWrapper(raw, seed=5)
    assert seeds == [5] and env.seed == 5
    nxt = env.set_seed(11)
    assert seeds == [5, 11] and env.seed == 11 and isinstance(nxt, int) and nxt != 11
    assert env.set_seed(12, static_seed=True) == 12 and seeds[-1] == 12
    assert env.set_seed(None) is None and seeds[-1] is None
    env.reset()
    env.rollout(2)
    assert seeds[4:] == [None, None]
    assert PettingZooWrapper(_spread()).seed is None


def test_set_seed_values_are_torchrl_s():
    ref = _spread()
    first, _ = ref.reset(seed=11)
    second, _ = ref.reset()  # what the first reset after set_seed(11) gives in TorchRL
    assert not np.array_equal(first["agent_1"], second["agent_1"])
    env = PettingZooWrapper(_spread())
    env.set_seed(11)
    np.testing.assert_array_equal(env.reset()["agent", "observation"][1].numpy(), second["agent_1"])
    built = PettingZooWrapper(_spread(), seed=11).reset()
    np.testing.assert_array_equal(built["agent", "observation"][1].numpy(), second["agent_1"])
    # the seeded reset starts an episode: a step may follow set_seed, as in TorchRL
    ref.reset(seed=3)
    obs, rewards, *_ = ref.step(dict.fromkeys(ref.agents, 2))
    env.set_seed(3)
    td = env.fake_tensordict()
    td["agent", "action"] = torch.full((3,), 2)
    nxt = env.step(td)["next"]
    np.testing.assert_array_equal(nxt["agent", "observation"][0].numpy(), obs["agent_0"])
    assert nxt["agent", "reward"][0].item() == np.float32(rewards["agent_0"])


def test_constructor_errors():
    with pytest.raises(TypeError, match="no env to wrap"):
        PettingZooWrapper()
    with pytest.raises(TypeError, match="not a PettingZoo env"):
        PettingZooWrapper(object())
    with pytest.raises(ValueError, match="use_mask=True"):
        PettingZooWrapper(tictactoe_v3.env())
    with pytest.raises(ValueError, match="batch_size"):
        PettingZooWrapper(_spread(), batch_size=[2])
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        PettingZooWrapper(_spread(), frame_skip=2)
    with pytest.raises(ValueError, match=r"invalid seed \(got -1; expected a non-negative int"):
        PettingZooWrapper(_spread(), seed=-1)
    with pytest.raises(ValueError, match=r"invalid seed \(got 1.5"):
        PettingZooEnv("simple_spread_v3", parallel=True, seed=1.5)
    with pytest.raises(ValueError, match="has no state"):
        PettingZooWrapper(tictactoe_v3.env(), use_mask=True, return_state=True)


def test_step_errors_leave_env_usable():
    env = PettingZooWrapper(_spread(), seed=0)
    with pytest.raises(RuntimeError, match="has not started"):
        env.rand_step(env.fake_tensordict())
    td = env.reset()
    td["agent", "action"] = torch.zeros(3, 2)
    with pytest.raises(SpecError, match="agent"):
        env.step(td)
    data = env.rollout(10)
    assert data.shape == (4,) and data["next", "done"][-1].item()
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(env.rand_action(env.step_mdp(data[-1])))
    assert env.reset()["done"].item() is False


def test_partial_reset_of_live_agent_refused():
    env = PettingZooWrapper(_spread(), seed=0)
    td = env.reset()
    td["agent", "_reset"] = torch.tensor([[True], [False], [False]])
    with pytest.raises(ValueError, match="cannot reset single agents"):
        env.reset(td)
    td = env.reset()
    td["_reset"] = torch.tensor([False])
    assert torch.equal(env.reset(td.clone())["agent", "observation"], td["agent", "observation"])


def test_pettingzoo_env_resolves_tasks():
    env = PettingZooEnv("simple_spread_v3", parallel=True, N=2, max_cycles=3, seed=4)
    raw = simple_spread_v3.parallel_env(N=2, max_cycles=3)
    raw.reset(seed=4)  # the seeded reset of the constructor; env.reset() continues from it
    obs, _ = raw.reset()
    np.testing.assert_array_equal(env.reset()["agent", "observation"][0].numpy(), obs["agent_0"])
    assert env.task == "simple_spread_v3" and env.rollout(10).shape == (3,)
    assert PettingZooEnv("mpe/simple_spread_v3", parallel=True).group_map["agent"][-1] == "agent_2"
    game = PettingZooEnv("classic/tictactoe_v3", parallel=False, use_mask=True)
    assert game.group_map == {"player_1": ["player_1"], "player_2": ["player_2"]}
    assert "simple_spread_v3" in PettingZooEnv.available_envs
    assert "tictactoe_v3" in PettingZooWrapper.available_envs
    with pytest.raises(ValueError, match="unknown task \\(got 'simple_spred_v3'"):
        PettingZooEnv("simple_spred_v3", parallel=True)
    with pytest.raises(ValueError, match="unknown task family"):
        PettingZooEnv("mpe3/simple_spread_v3", parallel=True)
    with pytest.raises(ValueError, match="unknown task"):
        PettingZooEnv("classic/simple_spread_v3", parallel=True)
    with pytest.raises(ValueError, match="no parallel version"):
        PettingZooEnv("tictactoe_v3", parallel=True)
    assert PettingZooEnv("classic/rps-v2", parallel=True).group_map == {
        "player": ["player_0", "player_1"]
    }


def test_serial_env_batches_wrappers():
    def make(seed):
        return lambda: PettingZooWrapper(_spread(), use_mask=True, seed=seed)

    batched = SerialEnv(2, [make(0), make(1)])
    assert batched.full_observation_spec["agent", "observation"].shape == (2, 3, 18)
    data = batched.rollout(6, break_when_any_done=False)
    assert data.shape == (2, 6)
    single = PettingZooWrapper(_spread(), use_mask=True, seed=1)
    torch.manual_seed(0)
    ref = single.rollout(4, actions=list(data["agent", "action"][1, :4]))
    assert torch.equal(
        ref["next", "agent", "observation"], data["next", "agent", "observation"][1, :4]
    )
    # the truncation at step 4 resets both envs; the next observation is a fresh start
    assert data["next", "done"][:, 3].all() and not data["done"][:, 4].any()
    batched.close()


def test_composite_spec_is_the_observation_spec():
    env = PettingZooWrapper(_spread())
    assert isinstance(env.observation_spec, Composite)
    assert env.observation_spec["agent"].shape == (3,)


@pytest.mark.parametrize(
    ("continuous", "value", "got", "rule"),
    [
        (False, 7, "7", r"an index in \[0, 4\]"),
        (False, -1, "-1", r"an index in \[0, 4\]"),
        (True, 1.5, r"\[1.5, 0.0, 0.0, 0.0, 0.0\]", r"values in \[0.0, 1.0\]"),
        (True, float("nan"), r"\[nan, 0.0", r"values in \[0.0, 1.0\]"),
    ],
    ids=["index-high", "index-negative", "box", "nan"],
)
def test_actions_outside_the_space_raise_naming_agent_key_and_value(continuous, value, got, rule):
    env = PettingZooWrapper(_spread(continuous_actions=continuous))
    td = env.reset()
    action = env.full_action_spec["agent", "action"].zero()
    action[1].view(-1)[0] = value
    with pytest.raises(
        ValueError,
        match=rf"PettingZooWrapper.step: the action of agent 'agent_1' is outside its action "
        rf"space \(got {got}.* at key \('agent', 'action'\); expected {rule}\)",
    ):
        env.step(td.set(("agent", "action"), action))
    # nothing reached the env: the same episode goes on with valid actions
    out = env.step(td.set(("agent", "action"), env.full_action_spec["agent", "action"].zero()))
    assert not out["next", "done"].item()


def test_an_aec_action_outside_the_space_names_the_acting_player():
    env = PettingZooWrapper(tictactoe_v3.env(), use_mask=True)
    td = env.reset()
    td["player_1", "action"], td["player_2", "action"] = torch.tensor([12]), torch.tensor([0])
    with pytest.raises(ValueError, match=r"agent 'player_1' .*got 12 .*an index in \[0, 8\]"):
        env.step(td)
    td["player_1", "action"], td["player_2", "action"] = torch.tensor([4]), torch.tensor([99])
    assert not env.step(td)["next", "done"].item()  # player_2 does not act: not checked
