"""MultiAgentNavigationEnv: per-agent done groups, partial resets of agents, root episode."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.builtin import MultiAgentNavigationEnv
from tdrl.envs.core import check_env_specs

BATCHES = [(), (2, 3)]


def _greedy(td, dt: float = 0.1):
    """Drives every agent straight to its goal (the observation holds goal - position)."""
    delta = td["agents", "observation"][..., 2:]
    return td.set(("agents", "action"), (delta / dt).clamp(-1.0, 1.0))


@pytest.mark.parametrize("batch", BATCHES)
def test_check_env_specs(batch):
    env = MultiAgentNavigationEnv(batch_size=batch, n_agents=4)
    check_env_specs(env)
    check_env_specs(env, break_when_any_done=False, num_steps=150)


def test_keys_and_shapes():
    env = MultiAgentNavigationEnv(batch_size=(2,), n_agents=3)
    assert env.action_keys == [("agents", "action")]
    assert env.reward_keys == [("agents", "reward")]
    assert env.reset_keys == ["_reset", ("agents", "_reset")]
    td = env.reset()
    assert td["agents", "observation"].shape == (2, 3, 4)
    assert td["agents", "done"].shape == (2, 3, 1)
    assert td["done"].shape == (2, 1)


def test_only_done_agents_are_reset():
    env = MultiAgentNavigationEnv(batch_size=(8,), n_agents=3, max_steps=1000)
    env.set_seed(0)
    td = env.reset()
    resets = 0
    for _ in range(40):
        td, root = env.step_and_maybe_reset(_greedy(td))
        nxt = td["next"]
        done = nxt["agents", "done"]
        assert not nxt["done"].any()
        resets += int(done.sum())
        moved_on = root["agents", "observation"]
        # Agents that were not done continue from their next observation ...
        keep = (~done).expand_as(moved_on)
        torch.testing.assert_close(moved_on[keep], nxt["agents", "observation"][keep])
        # ... done agents start again, not done, with a new goal.
        assert not root["agents", "done"].any()
        if done.any():
            fresh = done.expand_as(moved_on)
            assert not torch.equal(moved_on[fresh], nxt["agents", "observation"][fresh])
        td = root
    assert resets > 8


def test_explicit_agent_reset_mask():
    env = MultiAgentNavigationEnv(batch_size=(2,), n_agents=3, max_steps=6)
    td = env.reset()
    td = env.step_mdp(env.step(_greedy(td)))
    before = td["agents", "observation"].clone()
    mask = torch.tensor([[True, False, False], [False, False, True]]).unsqueeze(-1)
    td = env.reset(td.set(("agents", "_reset"), mask))
    after = td["agents", "observation"]
    assert torch.equal(after[~mask.squeeze(-1)], before[~mask.squeeze(-1)])
    assert not torch.equal(after[mask.squeeze(-1)], before[mask.squeeze(-1)])
    assert ("agents", "_reset") not in td.keys(True)
    # An agent reset does not restart the root episode: it is still truncated at step 6.
    truncated = []
    for _ in range(5):
        td = env.step(_greedy(td))
        truncated.append(bool(td["next", "truncated"].all()))
        td = env.step_mdp(td)
    assert truncated == [False, False, False, False, True]
    assert td["agents", "truncated"].all() and td["agents", "done"].all()


def test_finished_agents_stay_put_and_root_terminates_when_all_finish():
    env = MultiAgentNavigationEnv(n_agents=2, max_steps=1000)
    env.set_seed(3)
    td = env.reset()
    seen_partial = False
    for _ in range(100):
        td = env.step(_greedy(td))
        nxt = td["next"]
        finished = nxt["agents", "terminated"].squeeze(-1)
        if finished.any() and not finished.all():
            seen_partial = True
        prev = td["agents", "observation"]
        was_done = td["agents", "done"].squeeze(-1)
        # A finished agent that was not reset stays still and earns nothing.
        assert torch.equal(nxt["agents", "observation"][was_done], prev[was_done])
        assert nxt["agents", "reward"][was_done].eq(0).all()
        td = env.step_mdp(td)
        if nxt["terminated"].item():
            break
    assert nxt["terminated"].item() and nxt["agents", "terminated"].all()
    assert seen_partial


def test_root_reset_resets_every_agent_and_greedy_beats_random():
    env = MultiAgentNavigationEnv(batch_size=(32,), n_agents=3, max_steps=30)
    env.set_seed(0)
    greedy = env.rollout(30, _greedy, break_when_any_done=False)
    torch.manual_seed(0)
    random = env.rollout(30, break_when_any_done=False)
    g = greedy["next", "agents", "reward"].sum() / 32
    r = random["next", "agents", "reward"].sum() / 32
    assert g > r + 10
    # Every world is truncated at step 30 unless all its agents finished at the same step.
    ended_early = greedy["next", "terminated"].any(1)
    assert (greedy["next", "truncated"][:, -1] | ended_early).all()
    td = env.reset(greedy[:, -1]["next"].set("_reset", torch.ones(32, 1, dtype=torch.bool)))
    assert not td["agents", "done"].any() and not td["done"].any()


def test_seeding_is_reproducible():
    def run(seed: int):
        env = MultiAgentNavigationEnv(batch_size=(4,), n_agents=2)
        env.set_seed(seed)
        return env.rollout(20, _greedy, break_when_any_done=False)["agents", "observation"]

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))
