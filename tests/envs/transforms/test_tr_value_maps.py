"""RewardScaling, RewardClipping and ClipObservation."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import ClipObservation, RewardClipping, RewardScaling, TransformedEnv
from tdrl.specs import Bounded
from tdrl.testing import MultiKeyEnv, TransformContract, TransformTestEnv


class TestRewardScalingContract(TransformContract):
    def make_transform(self, layout):
        return RewardScaling(loc=1.0, scale=0.5)


class TestRewardClippingContract(TransformContract):
    def make_transform(self, layout):
        return RewardClipping(-0.5, 2.0)


class TestClipObservationContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return ClipObservation(0.0, 2.0, key)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_reward_maps_match_the_formula(batch):
    base = TransformedEnv(TransformTestEnv(batch, max_steps=9), RewardScaling(0.0, 1.0))
    torch.manual_seed(0)
    raw = base.rollout(5)["next", "reward"]
    env = TransformedEnv(TransformTestEnv(batch, max_steps=9), RewardScaling(loc=-1.0, scale=3.0))
    torch.manual_seed(0)
    torch.testing.assert_close(env.rollout(5)["next", "reward"], raw * 3 - 1)
    env = TransformedEnv(TransformTestEnv(batch, max_steps=9), RewardClipping(0.5, 2.5))
    torch.manual_seed(0)
    torch.testing.assert_close(env.rollout(5)["next", "reward"], raw.clamp(0.5, 2.5))


def test_default_keys_are_every_reward_and_specs_follow():
    env = TransformedEnv(MultiKeyEnv(batch_size=(2,)), RewardClipping(clamp_max=1.0))
    assert env.transform[0].in_keys == ["reward", ("discrete", "reward")]
    spec = env.full_reward_spec["discrete", "reward"]
    assert isinstance(spec, Bounded) and spec.high.max() == 1.0 and spec.low.min() == -float("inf")
    scaled = TransformedEnv(
        TransformTestEnv(), RewardScaling(scale=-2.0, in_keys="reward", out_keys="scaled_reward")
    )
    assert "scaled_reward" in scaled.full_reward_spec.keys()


def test_clip_observation_values_and_bounds():
    env = TransformedEnv(TransformTestEnv((2,)), ClipObservation(0.0, 2.0, out_keys="c"))
    td = env.rollout(4)
    torch.testing.assert_close(td["next", "c"], td["next", "observation"].clamp(0, 2))
    pix = TransformedEnv(
        TransformTestEnv(), ClipObservation(10, 300, "pixels")
    ).full_observation_spec["pixels"]
    assert pix.low.min() == 10 and pix.high.max() == 255
    with pytest.raises(ValueError, match="low is above high"):
        ClipObservation(2.0, 1.0)
