"""FrameSkipTransform and NoopResetEnv."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import FrameSkipTransform, NoopResetEnv, RewardSum, StepCounter, TransformedEnv
from tdrl.testing import CountingEnv, TransformContract, TransformTestEnv


class TestFrameSkipContract(TransformContract):
    forward_mode = "raises"

    def make_transform(self, layout):
        return FrameSkipTransform(2)


class TestNoopResetContract(TransformContract):
    partial_resets = False
    forward_mode = "raises"
    layouts = ("flat",)
    batch_sizes = ((),)  # partial resets of a batch are refused by design

    def make_transform(self, layout):
        return NoopResetEnv(3)


def test_frame_skip_repeats_and_sums_and_counts_frames_below():
    env = TransformedEnv(TransformTestEnv(max_steps=50), StepCounter())
    env.append_transform(FrameSkipTransform(3))
    env.append_transform(RewardSum())
    td = env.rollout(2)
    assert td["next", "step_count"].flatten().tolist() == [3, 6]
    assert td["next", "observation"][:, 0].tolist() == [3.5, 6.5]
    reward = td["next", "reward"].flatten()
    actions = td["action"].float() / 10
    torch.testing.assert_close(reward, torch.tensor([1 + 2 + 3, 4 + 5 + 6.0]) + 3 * actions)
    torch.testing.assert_close(td["next", "episode_reward"].flatten(), reward.cumsum(0))


def test_frame_skip_stops_at_the_end_of_an_episode():
    env = TransformedEnv(CountingEnv(batch_size=(2,), max_steps=4), FrameSkipTransform(3))
    td = env.rollout(5)
    assert td["next", "observation"][:, :, 0].tolist() == [[3.0, 4.0], [3.0, 4.0]]
    assert td["next", "reward"][:, :, 0].tolist() == [[3.0, 1.0], [3.0, 1.0]]
    with pytest.raises(ValueError, match="frame_skip must be"):
        FrameSkipTransform(0)


def test_noop_reset_plays_steps_and_refuses_partial_resets():
    env = TransformedEnv(CountingEnv(batch_size=(2,), max_steps=50), NoopResetEnv(5))
    torch.manual_seed(0)
    counts = {env.reset()["observation"][0].item() for _ in range(30)}
    assert counts <= {1.0, 2.0, 3.0, 4.0, 5.0} and len(counts) > 2
    td = env.reset()
    td["_reset"] = torch.tensor([[True], [False]])
    with pytest.raises(
        RuntimeError, match=r"NoopResetEnv._reset: partial resets are not supported"
    ):
        env.reset(td)
    td["_reset"] = torch.tensor([[True], [True]])
    assert env.reset(td)["observation"].ge(1).all()


def test_noop_reset_resets_again_when_an_episode_ends_and_takes_a_policy():
    env = TransformedEnv(CountingEnv(max_steps=2), NoopResetEnv(5, random=False))
    assert env.reset()["observation"].item() == 0.0
    seen = []

    def policy(td):
        seen.append(1)
        return td.set("action", torch.zeros(1))

    env = TransformedEnv(CountingEnv(max_steps=9), NoopResetEnv(3, random=False, policy=policy))
    assert env.reset()["observation"].item() == 3.0 and len(seen) == 3
