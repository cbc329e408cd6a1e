"""UnsqueezeTransform, SqueezeTransform, PermuteTransform and FlattenObservation."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    FlattenObservation,
    PermuteTransform,
    SqueezeTransform,
    TransformedEnv,
    UnsqueezeTransform,
)
from tdrl.specs import Bounded
from tdrl.testing import TransformContract, TransformTestEnv


class TestUnsqueezeContract(TransformContract):
    def make_transform(self, layout):
        return UnsqueezeTransform(
            -1, in_keys=("agents", "observation") if layout == "nested" else "observation"
        )


class TestFlattenContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return FlattenObservation(-3, -2, "pixels")


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_shapes_and_values(batch):
    env = TransformedEnv(
        TransformTestEnv(batch), UnsqueezeTransform(-2, in_keys="observation", out_keys="u")
    )
    td = env.rollout(2)
    torch.testing.assert_close(td["next", "u"], td["next", "observation"].unsqueeze(-2))
    env = TransformedEnv(TransformTestEnv(batch), FlattenObservation(-3, -1, "pixels", "flat"))
    td = env.rollout(2)
    assert td["flat"].shape == (*batch, 2, 144)
    torch.testing.assert_close(td["flat"], td["pixels"].flatten(-3, -1))
    spec = env.full_observation_spec["flat"]
    assert isinstance(spec, Bounded) and spec.dtype == torch.uint8


def test_discrete_spec_unsqueeze_keeps_its_class():
    env = TransformedEnv(TransformTestEnv((2,)), UnsqueezeTransform(-1, in_keys="action_mask"))
    assert type(env.full_observation_spec["action_mask"]).__name__ == "Categorical"
    assert env.full_observation_spec["action_mask"].shape == (2, 4, 1)


def test_unsqueeze_inverse_keys_squeeze_what_the_user_writes():
    class Seen(TransformTestEnv):
        def _step(self, td):
            self.seen = td["force"].clone()
            return super()._step(td)

    t = UnsqueezeTransform(-1, in_keys=[], in_keys_inv="force", out_keys_inv="force_u")
    env = TransformedEnv(Seen((2,)), t)
    assert env.full_action_spec["force_u"].shape == (2, 1, 1) and "force" not in env.action_keys
    td = env.reset()
    td["action"] = torch.zeros(2, dtype=torch.int64)
    td["force_u"] = torch.full((2, 1, 1), 0.5, dtype=torch.float64)
    env.step(td)
    assert env.base_env.seen.shape == (2, 1) and env.base_env.seen.eq(0.5).all()
    with pytest.raises(ValueError, match=r"UnsqueezeTransform._inv_call: the input has no size-1"):
        t.inv(TensorDict(force_u=torch.zeros(2, 3)))


def test_positive_dims_are_refused():
    with pytest.raises(ValueError, match="dim must be negative"):
        UnsqueezeTransform(0)
    with pytest.raises(ValueError, match=r"positive dims are not supported"):
        UnsqueezeTransform(1, allow_positive_dim=True)
    with pytest.raises(ValueError, match=r"SqueezeTransform.__init__: .*positive dims"):
        SqueezeTransform(1, allow_positive_dim=True)
    with pytest.raises(ValueError, match=r"needs a negative dim"):
        UnsqueezeTransform()
    with pytest.raises(ValueError, match="first_dim must be negative"):
        FlattenObservation(1, -1)
    with pytest.raises(ValueError, match="first_dim is after last_dim"):
        FlattenObservation(-1, -2)


class TestSqueezeContract(TransformContract):
    def make_transform(self, layout):
        nested = layout == "nested"
        return SqueezeTransform(-1, in_keys=("agents", "reward") if nested else "reward")


class TestPermuteContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return PermuteTransform([-1, -3, -2], "pixels")


def test_squeeze_removes_the_dim_and_gives_it_back_to_inputs():
    env = TransformedEnv(
        TransformTestEnv((2,)), SqueezeTransform(-1, in_keys="reward", in_keys_inv="force")
    )
    assert env.full_reward_spec["reward"].shape == (2,)
    assert env.full_action_spec["force"].shape == (2,)
    td = env.rand_action(env.reset())
    assert td["force"].shape == (2,)
    out = env.step(td)
    assert out["next", "reward"].shape == (2,) and out["force"].shape == (2,)
    with pytest.raises(ValueError, match=r"SqueezeTransform._apply_transform: no size-1 dim -1"):
        SqueezeTransform(-1, in_keys="x")(TensorDict(x=torch.zeros(2, 3)))
    with pytest.raises(ValueError, match="needs a negative dim"):
        SqueezeTransform()


def test_permute_values_inverse_and_refusals():
    x = torch.arange(24.0).reshape(2, 3, 4)
    out = PermuteTransform([-1, -3, -2], "x")(TensorDict(x=x.clone()))["x"]
    torch.testing.assert_close(out, x.permute(2, 0, 1))
    t = PermuteTransform([-2, -3, -1], in_keys_inv="a")
    back = t.inv(TensorDict(a=x.permute(1, 0, 2)))["a"]
    torch.testing.assert_close(back, x)
    cyc = PermuteTransform([-1, -3, -2], in_keys_inv="a")  # not its own inverse
    torch.testing.assert_close(cyc.inv(TensorDict(a=x.permute(2, 0, 1)))["a"], x)
    env = TransformedEnv(TransformTestEnv((2,)), PermuteTransform([-1, -3, -2], "pixels"))
    assert env.reset()["pixels"].shape == (2, 3, 6, 8)
    with pytest.raises(ValueError, match="dims must permute the trailing dims"):
        PermuteTransform([0, 1], "x")


def test_allow_positive_dim_is_accepted_with_a_negative_dim_as_torchrl():
    for cls in (UnsqueezeTransform, SqueezeTransform):
        t = cls(-1, allow_positive_dim=True, in_keys="x")
        assert t.allow_positive_dim and t.dim == -1
    x = torch.zeros(2, 3, 1)
    out = SqueezeTransform(-1, allow_positive_dim=True, in_keys="x")._apply_transform(x)
    assert out.shape == (2, 3)
