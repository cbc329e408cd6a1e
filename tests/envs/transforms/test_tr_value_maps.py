"""RewardScaling, RewardClipping, ClipTransform, SignTransform and BinarizeReward."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    BinarizeReward,
    ClipTransform,
    Compose,
    RewardClipping,
    RewardScaling,
    SignTransform,
    Transform,
    TransformedEnv,
)
from tdrl.specs import Binary, Bounded
from tdrl.testing import MultiKeyEnv, TransformContract, TransformTestEnv


class TestRewardScalingContract(TransformContract):
    def make_transform(self, layout):
        return RewardScaling(loc=1.0, scale=0.5)


class TestRewardClippingContract(TransformContract):
    def make_transform(self, layout):
        return RewardClipping(-0.5, 2.0)


class TestClipTransformContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return ClipTransform(key, low=0.0, high=2.0)


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
    assert env.transform.in_keys == ["reward", ("discrete", "reward")]
    spec = env.full_reward_spec["discrete", "reward"]
    assert isinstance(spec, Bounded) and spec.high.max() == 1.0 and spec.low.min() == -float("inf")
    scaled = TransformedEnv(
        TransformTestEnv(), RewardScaling(scale=-2.0, in_keys="reward", out_keys="scaled_reward")
    )
    assert "scaled_reward" in scaled.full_reward_spec.keys()


def test_clip_transform_values_and_bounds():
    env = TransformedEnv(
        TransformTestEnv((2,)), ClipTransform("observation", "c", low=0.0, high=2.0)
    )
    td = env.rollout(4)
    torch.testing.assert_close(td["next", "c"], td["next", "observation"].clamp(0, 2))
    pix = TransformedEnv(
        TransformTestEnv(), ClipTransform("pixels", low=10, high=300)
    ).full_observation_spec["pixels"]
    assert pix.low.min() == 10 and pix.high.max() == 255
    with pytest.raises(ValueError, match="low is above high"):
        ClipTransform("observation", low=2.0, high=1.0)
    with pytest.raises(TypeError, match=r"ClipTransform.__init__: no bound given"):
        ClipTransform("observation")
    with pytest.raises(ValueError, match=r"ClipTransform.__init__: no keys to clip"):
        ClipTransform(low=0.0)


def test_clip_transform_clips_actions_before_the_env_reads_them():
    seen = []

    class Spy(Transform):  # sits below the clip: records what the env below receives
        def _inv_apply_transform(self, value):
            seen.append(value.clone())
            return value

    env = TransformedEnv(TransformTestEnv((3,)), Spy(in_keys_inv="force"))
    env.append_transform(ClipTransform(in_keys_inv="force", low=-0.5, high=0.25))
    assert env.full_action_spec["force"].shape == (3, 1)
    td = env.rand_action(env.reset())
    td["force"] = torch.tensor([[-2.0], [0.1], [3.0]], dtype=torch.float64)
    env.step(td)
    torch.testing.assert_close(seen[-1], torch.tensor([[-0.5], [0.1], [0.25]], dtype=torch.float64))
    torch.testing.assert_close(
        td["force"], torch.tensor([[-2.0], [0.1], [3.0]], dtype=torch.float64)
    )


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_reward_scaling_standard_normal_divides(batch):
    base = TransformedEnv(TransformTestEnv(batch, max_steps=9), RewardScaling(0.0, 1.0))
    torch.manual_seed(0)
    raw = base.rollout(5)["next", "reward"]
    env = TransformedEnv(
        TransformTestEnv(batch, max_steps=9), RewardScaling(1.0, 4.0, standard_normal=True)
    )
    torch.manual_seed(0)
    torch.testing.assert_close(env.rollout(5)["next", "reward"], (raw - 1.0) / 4.0)
    positional = RewardScaling(1.0, 4.0, "reward", None, True)
    out = positional(TensorDict(reward=torch.tensor([5.0, 9.0])))
    torch.testing.assert_close(out["reward"], torch.tensor([1.0, 2.0]))


class TestSignContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return SignTransform(key)


class TestBinarizeRewardContract(TransformContract):
    def make_transform(self, layout):
        return BinarizeReward()


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_sign_and_binarize_match_the_formula(batch):
    base = TransformedEnv(TransformTestEnv(batch, max_steps=9), RewardScaling(-1.5, 1.0))
    torch.manual_seed(0)
    raw = base.rollout(5)
    env = TransformedEnv(
        TransformTestEnv(batch, max_steps=9),
        Compose(RewardScaling(-1.5, 1.0), SignTransform(["reward", "observation"], ["s", "o"])),
    )
    torch.manual_seed(0)
    td = env.rollout(5)
    torch.testing.assert_close(td["next", "s"], raw["next", "reward"].sign())
    torch.testing.assert_close(td["next", "o"], raw["next", "observation"].sign())
    spec = env.full_observation_spec["o"]
    assert isinstance(spec, Bounded) and spec.low.min() == -1 and spec.high.max() == 1
    env = TransformedEnv(
        TransformTestEnv(batch, max_steps=9), Compose(RewardScaling(-1.5, 1.0), BinarizeReward())
    )
    torch.manual_seed(0)
    td = env.rollout(5)
    assert td["next", "reward"].dtype == torch.int8
    assert td["next", "reward"].eq(raw["next", "reward"].gt(0).to(torch.int8)).all()
    assert isinstance(env.full_reward_spec["reward"], Binary)


def test_sign_maps_actions_and_binarize_refuses_wide_rewards():
    seen = []

    class Spy(Transform):
        def _inv_apply_transform(self, value):
            seen.append(value.clone())
            return value

    env = TransformedEnv(TransformTestEnv((3,)), Spy(in_keys_inv="force"))
    env.append_transform(SignTransform(in_keys_inv="force"))
    td = env.rand_action(env.reset())
    td["force"] = torch.tensor([[-2.0], [0.0], [3.0]], dtype=torch.float64)
    env.step(td)
    torch.testing.assert_close(seen[-1], torch.tensor([[-1.0], [0.0], [1.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"SignTransform.__init__: no keys to map"):
        SignTransform()
    with pytest.raises(ValueError, match=r"BinarizeReward._apply_transform: the reward's last dim"):
        BinarizeReward()(TensorDict(reward=torch.ones(2, 3)))
