"""UnsqueezeTransform and FlattenObservation."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import FlattenObservation, TransformedEnv, UnsqueezeTransform
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
    with pytest.raises(ValueError, match=r"allow_positive_dim=False"):
        UnsqueezeTransform(1, allow_positive_dim=True)
    with pytest.raises(ValueError, match=r"needs a negative dim"):
        UnsqueezeTransform()
    with pytest.raises(ValueError, match="first_dim must be negative"):
        FlattenObservation(1, -1)
    with pytest.raises(ValueError, match="first_dim is after last_dim"):
        FlattenObservation(-1, -2)
