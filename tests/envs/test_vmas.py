"""VmasWrapper/VmasEnv against raw VMAS: same seed and actions give the same data, partial resets,
groups, action encodings and specs."""

from __future__ import annotations

import itertools

import pytest
import torch

from tdrl.envs import MarlGroupMapType, check_env_specs
from tdrl.envs.libs import VmasEnv, VmasWrapper

vmas = pytest.importorskip("vmas")
from vmas.simulator.core import Agent, Sphere, World  # noqa: E402
from vmas.simulator.scenario import BaseScenario  # noqa: E402


class Countdown(BaseScenario):
    """Agents drift on a plane; env ``i`` terminates after a random 2..6 steps (drawn at reset),
    so envs end at different steps. Optional dict observations and heterogeneous agents."""

    def make_world(self, batch_dim, device, **kwargs):
        n = kwargs.pop("n_agents", 2)
        self.dict_obs = kwargs.pop("dict_obs", False)
        self.obs_sizes = kwargs.pop("obs_sizes", None)
        world = World(batch_dim, device)
        for i in range(n):
            world.add_agent(Agent(name=f"agent_{i}", collide=False, shape=Sphere(0.05)))
        self.t = torch.zeros(batch_dim, dtype=torch.long, device=device)
        self.horizon = torch.zeros(batch_dim, dtype=torch.long, device=device)
        return world

    def reset_world_at(self, env_index=None):
        rows = self.world.batch_dim if env_index is None else 1
        for agent in self.world.agents:
            pos = torch.rand(rows, 2, device=self.world.device) - 0.5
            agent.set_pos(pos if env_index is None else pos[0], batch_index=env_index)
        horizon = torch.randint(2, 7, (rows,), device=self.world.device)
        if env_index is None:
            self.t.zero_()
            self.horizon.copy_(horizon)
        else:
            self.t[env_index] = 0
            self.horizon[env_index] = horizon[0]

    def post_step(self):
        self.t += 1

    def observation(self, agent):
        obs = torch.cat([agent.state.pos, agent.state.vel], dim=-1)
        if self.obs_sizes is not None:
            return obs[:, : self.obs_sizes[self.world.agents.index(agent)]]
        if self.dict_obs:
            return {"pos": obs[:, :2], "motion": {"vel": obs[:, 2:]}}
        return obs

    def reward(self, agent):
        return -torch.linalg.vector_norm(agent.state.pos, dim=-1)

    def done(self):
        return self.t >= self.horizon

    def info(self, agent):
        return {"x": agent.state.pos[:, 0], "pos": agent.state.pos}


def raw_rollout(env, seed: int, actions: list[list[torch.Tensor]]) -> list[dict]:
    """A plain VMAS loop that resets the done envs (all at once when every env is done)."""
    env.seed(seed)
    obs, infos = env.reset(return_info=True)
    steps = []
    for acts in actions:
        next_obs, rews, dones, next_infos = env.step([a.clone() for a in acts])
        steps.append(
            dict(obs=obs, infos=infos, next_obs=next_obs, rews=rews, dones=dones, ninfos=next_infos)
        )
        obs, infos = next_obs, next_infos
        if dones.all():
            obs, infos = env.reset(return_info=True)
        elif dones.any():
            for i in dones.nonzero().flatten().tolist():
                env.reset_at(i, return_observations=False)
            fresh, fresh_infos = env.get_from_scenario(True, False, True, False)
            keep = [torch.where(_rows(dones, f), f, o) for f, o in zip(fresh, obs)]
            infos = [
                {k: torch.where(_rows(dones, fi[k]), fi[k], oi[k]) for k in oi}
                for fi, oi in zip(fresh_infos, infos)
            ]
            obs = keep
    return steps


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(-1, *([1] * (like.ndim - 1)))


def tdrl_rollout(env, seed: int, group_actions: dict[str, torch.Tensor]):
    env.set_seed(seed)
    counter = itertools.count()

    def policy(td):
        t = next(counter)
        for group, table in group_actions.items():
            td.set((group, "action"), table[t])
        return td

    steps = next(iter(group_actions.values())).shape[0]
    return env.rollout(steps, policy, break_when_any_done=False)


def assert_same(data, steps, env) -> None:
    """Every observation, info, reward and ``done`` of ``data`` equals raw VMAS's."""
    names = [a.name for a in env.env.agents]
    for t, rec in enumerate(steps):
        dones = rec["dones"].reshape(-1, 1)
        torch.testing.assert_close(data["next", "done"][:, t], dones, rtol=0, atol=0)
        for group, members in env.group_map.items():
            for j, agent in enumerate(members):
                i = names.index(agent)
                for root, obs, infos in (
                    ((), rec["obs"], rec["infos"]),
                    (("next",), rec["next_obs"], rec["ninfos"]),
                ):
                    got = data[(*root, group, "observation")][:, t, j]
                    torch.testing.assert_close(got, obs[i], rtol=0, atol=0)
                    for key, value in infos[i].items():
                        got = data[(*root, group, "info", key)][:, t, j]
                        torch.testing.assert_close(
                            got, value.reshape(got.shape).float(), rtol=0, atol=0
                        )
                reward = data["next", group, "reward"][:, t, j, 0]
                torch.testing.assert_close(reward, rec["rews"][i], rtol=0, atol=0)


def _continuous(steps: int, num_envs: int, n_agents: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand((steps, num_envs, n_agents, 2), generator=gen) * 2 - 1


def test_staggered_partial_resets_match_raw_vmas():
    env = VmasWrapper(vmas.make_env(Countdown(), num_envs=6, seed=0))
    raw = vmas.make_env(Countdown(), num_envs=6, seed=0)
    table = _continuous(12, 6, 2)
    data = tdrl_rollout(env, 3, {"agents": table})
    steps = raw_rollout(raw, 3, [list(a.unbind(1)) for a in table])
    dones = torch.stack([s["dones"] for s in steps])
    assert dones.any(1).sum() > 2 and not dones.all(1).any()  # envs end at different steps
    assert_same(data, steps, env)
    assert (data["next", "terminated"] == data["next", "done"]).all()
    assert not data["next", "truncated"].any()


def test_navigation_with_horizon_matches_raw_vmas():
    # collisions=False drops the lidar, the costly part of a step; the default is checked in
    # test_check_env_specs_passes.
    env = VmasEnv("navigation", num_envs=4, max_steps=3, seed=0, collisions=False)
    raw = vmas.make_env("navigation", num_envs=4, max_steps=3, seed=0, collisions=False)
    table = _continuous(7, 4, 4)
    data = tdrl_rollout(env, 1, {"agents": table})
    assert_same(data, raw_rollout(raw, 1, [list(a.unbind(1)) for a in table]), env)
    # navigation never terminates in 7 random steps: every done is VMAS's horizon (truncated).
    assert not data["next", "terminated"].any()
    horizon = torch.tensor([t % 3 == 2 for t in range(7)]).expand(4, 7).unsqueeze(-1)
    torch.testing.assert_close(data["next", "truncated"], horizon, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("categorical", "multidiscrete"), [(True, False), (False, False), (True, True), (False, True)]
)
def test_discrete_actions_match_raw_vmas(categorical, multidiscrete):
    kwargs = dict(
        num_envs=3, continuous_actions=False, multidiscrete_actions=multidiscrete, collisions=False
    )
    env = VmasEnv("navigation", categorical_actions=categorical, seed=0, max_steps=4, **kwargs)
    raw = vmas.make_env("navigation", seed=0, max_steps=4, **kwargs)
    gen = torch.Generator().manual_seed(0)
    nvec = [3, 3] if multidiscrete else [9]
    index = torch.stack([torch.randint(0, n, (6, 3, 4), generator=gen) for n in nvec], -1)
    if categorical:
        table = index if multidiscrete else index[..., 0]
    else:
        table = torch.cat(
            [torch.nn.functional.one_hot(index[..., k], n) for k, n in enumerate(nvec)], -1
        )
    assert env.full_action_spec["agents", "action"].is_in(table[0])
    data = tdrl_rollout(env, 2, {"agents": table})
    assert_same(data, raw_rollout(raw, 2, [list(a.unbind(1)) for a in index]), env)


def test_two_groups_match_raw_vmas():
    env = VmasEnv("simple_adversary", num_envs=3, max_steps=4, seed=0)
    raw = vmas.make_env("simple_adversary", num_envs=3, max_steps=4, seed=0)
    assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    tables = {"adversary": _continuous(6, 3, 1, 1), "agent": _continuous(6, 3, 2, 2)}
    data = tdrl_rollout(env, 4, tables)
    per_agent = [
        [t["adversary"][:, 0], t["agent"][:, 0], t["agent"][:, 1]] for t in _by_step(tables)
    ]
    assert_same(data, raw_rollout(raw, 4, per_agent), env)


def _by_step(tables: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    steps = next(iter(tables.values())).shape[0]
    return [{g: t[s] for g, t in tables.items()} for s in range(steps)]


def test_group_map_dict_order_and_one_group_per_agent():
    env = VmasWrapper(
        vmas.make_env(Countdown(), num_envs=4, seed=0, n_agents=3),
        group_map={"pair": ["agent_2", "agent_0"], "solo": ["agent_1"]},
    )
    raw = vmas.make_env(Countdown(), num_envs=4, seed=0, n_agents=3)
    tables = {"pair": _continuous(5, 4, 2, 1), "solo": _continuous(5, 4, 1, 2)}
    data = tdrl_rollout(env, 0, tables)
    per_agent = [[t["pair"][:, 1], t["solo"][:, 0], t["pair"][:, 0]] for t in _by_step(tables)]
    assert_same(data, raw_rollout(raw, 0, per_agent), env)
    single = VmasWrapper(
        vmas.make_env(Countdown(), num_envs=2, n_agents=3),
        group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT,
    )
    assert single.action_keys == [
        ("agent_0", "action"),
        ("agent_1", "action"),
        ("agent_2", "action"),
    ]
    assert single.full_observation_spec["agent_1", "observation"].shape == (2, 1, 4)


def test_partial_reset_changes_only_the_masked_envs():
    env = VmasWrapper(vmas.make_env(Countdown(), num_envs=5, seed=0))
    raw = vmas.make_env(Countdown(), num_envs=5, seed=0)
    env.set_seed(7)
    td = env.step_mdp(env.step(env.reset().set(("agents", "action"), _continuous(1, 5, 2)[0])))
    td["done"] = torch.tensor([[True], [False], [True], [True], [False]])
    before = td.clone()
    td["_reset"] = torch.tensor([[True], [False], [True], [False], [False]])
    out = env.reset(td)
    raw.seed(7)
    raw.reset()
    raw.step(list(_continuous(1, 5, 2)[0].unbind(1)))
    for i in (0, 2):
        raw.reset_at(i, return_observations=False)
    fresh = torch.stack(raw.get_from_scenario(True, False, False, False)[0], dim=1)
    reset_rows, kept_rows = [0, 2], [1, 3, 4]
    assert "_reset" not in out.keys()
    torch.testing.assert_close(
        out["agents", "observation"][reset_rows], fresh[reset_rows], rtol=0, atol=0
    )
    assert (
        out["agents", "observation"][reset_rows] != before["agents", "observation"][reset_rows]
    ).all()
    assert not out["done"][reset_rows].any()
    assert (out[kept_rows] == before[kept_rows]).all()  # every kept value, done flags included


def test_check_env_specs_passes():
    for env in (
        VmasEnv("navigation", num_envs=3, max_steps=2, seed=0),
        VmasEnv("simple_tag", num_envs=2, continuous_actions=False, categorical_actions=False),
        VmasWrapper(vmas.make_env(Countdown(), num_envs=3, dict_obs=True)),
    ):
        check_env_specs(env, break_when_any_done="both", seed=0)


def test_dict_observations_and_info_are_nested_entries():
    env = VmasWrapper(vmas.make_env(Countdown(), num_envs=3, dict_obs=True))
    spec = env.full_observation_spec["agents"]
    assert spec["observation", "pos"].shape == (3, 2, 2)
    assert spec["observation", "motion", "vel"].shape == (3, 2, 2)
    assert spec["info", "x"].shape == (3, 2, 1) and spec["info", "pos"].shape == (3, 2, 2)
    td = env.rand_step(env.reset())
    pos = torch.stack([a.state.pos for a in env.env.agents], dim=1)
    torch.testing.assert_close(td["next", "agents", "observation", "pos"], pos, rtol=0, atol=0)
    torch.testing.assert_close(td["next", "agents", "info", "x"], pos[..., :1], rtol=0, atol=0)


def test_heterogeneous_group_is_refused():
    with pytest.raises(ValueError, match=r"differ in their observation.*ONE_GROUP_PER_AGENT"):
        VmasWrapper(vmas.make_env(Countdown(), num_envs=2, obs_sizes=[4, 3]))
    with pytest.raises(ValueError, match="group 'agents' differ"):
        VmasEnv("simple_adversary", num_envs=2, group_map=MarlGroupMapType.ALL_IN_ONE_GROUP)


def test_horizon_end_that_also_terminates_is_both():
    # Every Countdown env has ended by step 6; with max_steps=6 both flags are set there.
    kwargs = dict(num_envs=4, max_steps=6, seed=0)
    env = VmasWrapper(vmas.make_env(Countdown(), **kwargs))
    env.set_seed(0)
    td = env.reset()
    for _ in range(6):
        td = env.step_mdp(env.rand_step(td))
    assert td["terminated"].all() and td["truncated"].all() and td["done"].all()
    both = VmasWrapper(vmas.make_env(Countdown(), terminated_truncated=True, **kwargs))
    both.set_seed(0)
    td = both.reset()
    for _ in range(6):
        td = both.step_mdp(both.rand_step(td))
    assert td["terminated"].all() and td["truncated"].all()


@pytest.mark.parametrize("option", ["dict_spaces", "terminated_truncated"])
def test_vmas_output_modes_give_the_same_data(option):
    table = {"agents": _continuous(8, 4, 2)}
    plain = tdrl_rollout(VmasWrapper(vmas.make_env(Countdown(), num_envs=4, max_steps=3)), 5, table)
    other = VmasWrapper(vmas.make_env(Countdown(), num_envs=4, max_steps=3, **{option: True}))
    assert (tdrl_rollout(other, 5, table) == plain).all()


def test_seeding_is_reproducible_and_leaves_torch_alone():
    env = VmasEnv("navigation", num_envs=3, max_steps=3, collisions=False)
    table = {"agents": _continuous(5, 3, 4)}
    state = torch.get_rng_state()
    first = tdrl_rollout(env, 11, table)
    assert torch.equal(torch.get_rng_state(), state)
    # The info of a reset is what the scenario last computed (VMAS does not reset it), so the
    # comparison leaves out the root info of the first step; every later one is under "next".
    again = tdrl_rollout(env, 11, table)
    assert (again["next"] == first["next"]).all()
    assert torch.equal(again["agents", "observation"], first["agents", "observation"])
    other = tdrl_rollout(env, 12, table)
    assert not torch.equal(other["agents", "observation"], first["agents", "observation"])


def test_set_seed_none_is_vmas_seed_zero_as_torchrl():
    # TorchRL's set_seed(None) calls VMAS's seed(None), which seeds 0 (VMAS's own default)
    env = VmasEnv("navigation", num_envs=3, max_steps=3, collisions=False, seed=5)
    table = {"agents": _continuous(4, 3, 4)}
    data = tdrl_rollout(env, None, table)
    raw = vmas.make_env("navigation", num_envs=3, max_steps=3, collisions=False, seed=5)
    assert_same(data, raw_rollout(raw, 0, [list(a.unbind(1)) for a in table["agents"]]), env)
    assert env.set_seed(None) is None


def test_outputs_are_not_overwritten_by_later_steps():
    env = VmasEnv("navigation", num_envs=2, seed=0, collisions=False)
    td = env.rand_step(env.reset())
    kept = td.clone()
    for _ in range(3):
        env.rand_step(env.step_mdp(td))
    assert (td == kept).all()


def test_batch_of_thousands():
    env = VmasEnv("navigation", num_envs=4096, n_agents=2, collisions=False, max_steps=2, seed=0)
    data = env.rollout(3, break_when_any_done=False)
    assert data["next", "agents", "observation"].shape == (4096, 3, 2, 6)
    assert data["next", "truncated"][:, 1].all() and not data["next", "truncated"][:, 2].any()
