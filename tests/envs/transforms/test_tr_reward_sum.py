"""RewardSum: episode returns per reward key, reset per done group."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import MultiAgentNavigationEnv, RewardSum, TransformedEnv
from tdrl.testing import MultiKeyEnv, NestedCountingEnv, TransformContract, TransformTestEnv


class TestRewardSumContract(TransformContract):
    forward_mode = "raises"

    def make_transform(self, layout):
        return RewardSum()


def _reference_returns(reward: torch.Tensor, done: torch.Tensor) -> list[float]:
    """Plain loop over one member's trajectory."""
    out, total = [], 0.0
    for r, d in zip(reward.tolist(), done.tolist()):
        total += r
        out.append(total)
        if d:
            total = 0.0
    return out


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_episode_reward_matches_a_plain_loop(batch):
    env = TransformedEnv(TransformTestEnv(batch, max_steps=3), RewardSum())
    torch.manual_seed(0)
    td = env.rollout(9, break_when_any_done=False)
    rewards = td["next", "reward"].reshape(-1, 9)
    done = td["next", "done"].reshape(-1, 9)
    sums = td["next", "episode_reward"].reshape(-1, 9)
    for row in range(rewards.shape[0]):
        ref = _reference_returns(rewards[row], done[row])
        torch.testing.assert_close(sums[row], torch.tensor(ref))
    assert td["episode_reward"].reshape(-1, 9)[:, 0].eq(0).all()


def test_default_keys_cover_every_reward_key():
    env = TransformedEnv(MultiKeyEnv(batch_size=(2,)), RewardSum())
    t = env.transform
    assert t.in_keys == ["reward", ("discrete", "reward")]
    assert t.out_keys == ["episode_reward", ("discrete", "episode_reward")]
    assert "episode_reward" in env.state_keys
    td = env.rollout(3)
    torch.testing.assert_close(
        td["next", "discrete", "episode_reward"],
        td["next", "discrete", "reward"].cumsum(1),
    )


def test_explicit_keys():
    env = TransformedEnv(TransformTestEnv(), RewardSum(in_keys="reward", out_keys="ret"))
    td = env.rollout(2)
    assert td["next", "ret"][-1].item() == pytest.approx(td["next", "reward"].sum().item())


def test_only_the_reset_agent_sum_restarts():
    env = TransformedEnv(NestedCountingEnv(batch_size=(2,), max_steps=50), RewardSum())
    td = env.reset()
    for _ in range(2):
        td = env.step_mdp(env.step(env.rand_action(td)))
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[0, 1] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td.clone())
    expected = torch.full((2, 3, 1), 2.0)
    expected[0, 1] = 0.0
    assert out["nested_1", "episode_reward"].equal(expected)
    assert out["episode_reward"].eq(2).all() and out["nested_2", "episode_reward"].eq(2).all()


def test_multi_agent_builtin_env_per_agent_returns():
    env = TransformedEnv(MultiAgentNavigationEnv(batch_size=(2,), n_agents=3), RewardSum())
    torch.manual_seed(0)
    td = env.rollout(6, break_when_any_done=False)
    reward = td["next", "agents", "reward"]
    done = td["next", "agents", "done"]
    sums = td["next", "agents", "episode_reward"]
    for b in range(2):
        for a in range(3):
            ref = _reference_returns(reward[b, :, a, 0], done[b, :, a, 0])
            torch.testing.assert_close(sums[b, :, a, 0], torch.tensor(ref))


def test_wrong_key_is_reported_with_available_keys():
    with pytest.raises(KeyError, match=r"RewardSum.in_keys: key 'rwd'.*available keys"):
        TransformedEnv(TransformTestEnv(), RewardSum(in_keys="rwd"))
