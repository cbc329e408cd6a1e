"""PettingZooWrapper with agents that leave mid-episode, infos and masks given in infos."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from tdrl.envs import SerialEnv, check_env_specs
from tdrl.envs.libs import PettingZooWrapper
from tdrl.specs import Unbounded

AGENTS = ("walker_0", "walker_1", "runner_0")


class Leaving(ParallelEnv):
    """``walker_i`` terminates at step ``i + 1``; ``runner_0`` is truncated at step 4.

    Observation ``[t, agent index]``; reward ``action + t``; info ``score = 10 t + index``; the
    action mask ``[1, t % 2, 1 - t % 2]`` is in a Dict observation or in the info dict. ``step``
    refuses actions of agents that are not in ``self.agents``.
    """

    metadata = {"name": "leaving_v0", "is_parallelizable": True}

    def __init__(self, mask_in: str = "observation"):
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.mask_in = mask_in
        self.render_mode = None
        self.t = 0

    def observation_space(self, agent):
        box = spaces.Box(-10, 10, (2,), np.float32)
        if self.mask_in == "observation":
            mask = spaces.Box(0, 1, (3,), np.int8)
            return spaces.Dict({"observation": box, "action_mask": mask})
        return box

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _mask(self):
        return np.array([1, self.t % 2, 1 - self.t % 2], np.int8)

    def _obs(self, agent):
        obs = np.array([self.t, AGENTS.index(agent)], np.float32)
        if self.mask_in == "observation":
            return {"observation": obs, "action_mask": self._mask()}
        return obs

    def _info(self, agent):
        info = {"score": 10.0 * self.t + AGENTS.index(agent), "name": agent}
        if self.mask_in == "info":
            info["action_mask"] = self._mask()
        return info

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(AGENTS)
        return {a: self._obs(a) for a in self.agents}, {a: self._info(a) for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise AssertionError(f"actions for {sorted(actions)}, live agents {self.agents}")
        self.t += 1
        rewards = {a: float(actions[a]) + self.t for a in self.agents}
        terms = {a: a == f"walker_{self.t - 1}" for a in self.agents}
        truncs = {a: self.t >= 4 for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: self._info(a) for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def state(self):
        return np.array([self.t], np.float32)


def _act(td, value=1):
    td["walker", "action"] = torch.full((2,), value)
    td["runner", "action"] = torch.full((1,), value)
    return td


def test_specs_of_infos_and_masks():
    for mask_in in ("observation", "info"):
        env = PettingZooWrapper(Leaving(mask_in), use_mask=True, done_on_any=False)
        assert env.group_map == {"walker": ["walker_0", "walker_1"], "runner": ["runner_0"]}
        obs = env.full_observation_spec
        score = obs["walker", "info", "score"]  # the non-numeric "name" entry is left out
        assert isinstance(score, Unbounded) and score.shape == (2,) and score.dtype == torch.float32
        assert list(obs["walker", "info"].keys()) == ["score"]
        assert obs["walker", "action_mask"].shape == (2, 3)
        check_env_specs(env, break_when_any_done="both")
    observed = PettingZooWrapper(Leaving("observation")).full_observation_spec
    assert observed["walker", "observation", "observation"].shape == (2, 2)
    informed = PettingZooWrapper(Leaving("info")).full_observation_spec
    assert informed["walker", "observation"].shape == (2, 2)


@pytest.mark.parametrize("mask_in", ["observation", "info"])
def test_agents_that_leave_in_a_parallel_env(mask_in):
    env = PettingZooWrapper(Leaving(mask_in), use_mask=True, done_on_any=False)
    td = env.reset()
    assert td["walker", "mask"].all() and td["walker", "action_mask"].tolist() == [[1, 0, 1]] * 2
    steps = []
    for _ in range(4):
        td = env.step(_act(td))
        steps.append(td["next"])
        td = env.step_mdp(td)
    walker = [s["walker"] for s in steps]
    key = ("observation", "observation") if mask_in == "observation" else "observation"
    # step 1: walker_0 leaves with its final data; from step 2 on it is absent
    assert walker[0][key].tolist() == [[1, 0], [1, 1]]
    assert walker[0]["reward"].flatten().tolist() == [2, 2]
    assert walker[0]["terminated"].flatten().tolist() == [True, False]
    assert walker[0]["truncated"].flatten().tolist() == [False, False]
    assert walker[0]["mask"].tolist() == [False, True]
    assert walker[0]["info", "score"].tolist() == [10, 11]
    assert walker[0]["action_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert walker[1][key].tolist() == [[0, 0], [2, 1]]
    assert walker[1]["reward"].flatten().tolist() == [0, 3]
    assert walker[1]["done"].flatten().tolist() == [True, True]
    assert walker[1]["terminated"].flatten().tolist() == [True, True]
    assert walker[1]["truncated"].flatten().tolist() == [True, False]  # absent: every flag
    assert walker[1]["info", "score"].tolist() == [0, 21]
    assert walker[2]["reward"].flatten().tolist() == [0, 0]
    assert [s["done"].item() for s in steps] == [False, False, False, True]
    assert [s["truncated"].item() for s in steps] == [False, False, False, True]
    assert [s["runner", "reward"].item() for s in steps] == [2, 3, 4, 5]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(_act(td))


def test_done_on_any_ends_the_episode_with_the_first_agent():
    env = PettingZooWrapper(Leaving(), use_mask=True)  # parallel default: done_on_any=True
    assert env.done_on_any
    data = env.rollout(10, _act)
    assert data.shape == (1,)
    assert data["next", "terminated"].item() and not data["next", "truncated"].item()


def test_rollout_goes_on_while_agents_are_gone():
    env = PettingZooWrapper(Leaving(), use_mask=True, done_on_any=False)
    data = env.rollout(9, _act, break_when_any_done=False)
    # the partial resets that ask for the agents that left change nothing until the root ends
    assert data["next", "done"].flatten().tolist() == [False, False, False, True] * 2 + [False]
    assert data["walker", "mask"][:, 0].tolist() == [True, False, False, False] * 2 + [True]
    assert data["next", "runner", "reward"].flatten().tolist() == [2, 3, 4, 5] * 2 + [2]
    np.testing.assert_array_equal(data["walker", "observation", "observation"][4], [[0, 0], [0, 1]])


def test_reset_of_an_agent_still_in_the_episode_is_refused():
    env = PettingZooWrapper(Leaving(), use_mask=True, done_on_any=False)
    td = env.step_mdp(env.step(_act(env.reset())))
    td["walker", "_reset"] = torch.tensor([[False], [True]])
    with pytest.raises(ValueError, match=r"\['walker_1'\] are still in the episode"):
        env.reset(td)
    td["walker", "_reset"] = torch.tensor([[True], [False]])  # walker_0 has left: no-op
    kept = env.reset(td.clone())
    assert kept["walker", "done"].flatten().tolist() == [True, False]
    assert torch.equal(
        kept["runner", "observation", "observation"], td["runner", "observation", "observation"]
    )
    assert env.step(_act(kept))["next", "runner", "reward"].item() == 3
    ended = PettingZooWrapper(Leaving(), use_mask=True)  # done_on_any: walker_0 ends it
    td = ended.step_mdp(ended.step(_act(ended.reset())))
    td["walker", "_reset"] = torch.tensor([[True], [False]])
    with pytest.raises(ValueError, match="the episode is over"):
        ended.reset(td)


def test_agents_that_leave_in_an_aec_env():
    env = PettingZooWrapper(parallel_to_aec(Leaving("info")), use_mask=True, return_state=True)
    assert env.group_map == {a: [a] for a in AGENTS} and not env.done_on_any
    td = env.reset()
    order, rewards = [], []
    for _ in range(8):
        acting = [a for a in AGENTS if td[a, "mask"].item()]
        order.extend(acting)
        for a in AGENTS:
            td[a, "action"] = torch.tensor([1])
        td = env.step(td)
        rewards.append([td["next", a, "reward"].item() for a in AGENTS])
        if td["next", "done"].item():
            break
        td = env.step_mdp(td)
    # cycle 1: all three act; walker_0 leaves, then walker_1; runner is truncated at cycle 4
    assert order == [
        "walker_0",
        "walker_1",
        "runner_0",
        "walker_1",
        "runner_0",
        "runner_0",
        "runner_0",
    ]
    assert rewards[2] == [2, 2, 2] and rewards[4] == [0, 3, 3] and rewards[6] == [0, 0, 5]
    assert td["next", "truncated"].item() and td["next", "walker_0", "terminated"].item()
    assert td["next", "state"].tolist() == [4.0]


def test_serial_env_with_agents_leaving():
    make = lambda: PettingZooWrapper(Leaving(), use_mask=True, done_on_any=False)  # noqa: E731
    batched = SerialEnv(2, [make, make])
    data = batched.rollout(6, _batched_act, break_when_any_done=False)
    assert data["next", "done"][:, :, 0].tolist() == [[False, False, False, True, False, False]] * 2
    assert data["next", "walker", "mask"][0, :, 1].tolist() == [
        True,
        False,
        False,
        False,
        True,
        False,
    ]
    batched.close()


def _batched_act(td):
    td["walker", "action"] = torch.ones(2, 2, dtype=torch.int64)
    td["runner", "action"] = torch.ones(2, 1, dtype=torch.int64)
    return td
