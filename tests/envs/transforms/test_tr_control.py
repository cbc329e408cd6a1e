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


def test_frame_skip_steps_through_the_end_of_an_episode_as_torchrl():
    env = TransformedEnv(CountingEnv(batch_size=(2,), max_steps=4), FrameSkipTransform(3))
    td = env.rollout(5)
    # the second step passes the end (4) and goes on to 6: TorchRL repeats every frame
    assert td["next", "observation"][:, :, 0].tolist() == [[3.0, 6.0], [3.0, 6.0]]
    assert td["next", "reward"][:, :, 0].tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert td["next", "done"][:, :, 0].tolist() == [[False, True], [False, True]]
    with pytest.raises(ValueError, match="frame_skip must be"):
        FrameSkipTransform(0)


class _DoneOnlyAt(CountingEnv):
    """Done at exactly ``max_steps`` (a done that does not last)."""

    def _step(self, tensordict):
        out = super()._step(tensordict)
        return out.set("terminated", out["observation"] == self.max_steps)


def test_frame_skip_reports_the_last_frame_done_only_as_torchrl():
    env = TransformedEnv(_DoneOnlyAt(max_steps=3), FrameSkipTransform(2))
    td = env.rollout(3)
    # frame 3 was done, frame 4 (the one returned) is not: TorchRL returns the last frame
    assert td["next", "observation"].flatten().tolist() == [2.0, 4.0, 6.0]
    assert not td["next", "done"].any()
