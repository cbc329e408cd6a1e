"""UnsqueezeTransform and FlattenObservation."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import FlattenObservation, TransformedEnv, UnsqueezeTransform
from tdrl.specs import Bounded
from tdrl.testing import TransformContract, TransformTestEnv


class TestUnsqueezeContract(TransformContract):
    def make_transform(self, layout):
        return UnsqueezeTransform(
            -1, ("agents", "observation") if layout == "nested" else "observation"
        )


class TestFlattenContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return FlattenObservation(-3, -2, "pixels")


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_shapes_and_values(batch):
    env = TransformedEnv(TransformTestEnv(batch), UnsqueezeTransform(-2, "observation", "u"))
    td = env.rollout(2)
    torch.testing.assert_close(td["next", "u"], td["next", "observation"].unsqueeze(-2))
    env = TransformedEnv(TransformTestEnv(batch), FlattenObservation(-3, -1, "pixels", "flat"))
    td = env.rollout(2)
    assert td["flat"].shape == (*batch, 2, 144)
    torch.testing.assert_close(td["flat"], td["pixels"].flatten(-3, -1))
    spec = env.full_observation_spec["flat"]
    assert isinstance(spec, Bounded) and spec.dtype == torch.uint8


def test_discrete_spec_unsqueeze_keeps_its_class():
    env = TransformedEnv(TransformTestEnv((2,)), UnsqueezeTransform(-1, "action_mask"))
    assert type(env.full_observation_spec["action_mask"]).__name__ == "Categorical"
    assert env.full_observation_spec["action_mask"].shape == (2, 4, 1)


def test_positive_dims_are_refused():
    with pytest.raises(ValueError, match="dim must be negative"):
        UnsqueezeTransform(0)
    with pytest.raises(ValueError, match="first_dim must be negative"):
        FlattenObservation(1, -1)
    with pytest.raises(ValueError, match="first_dim is after last_dim"):
        FlattenObservation(-1, -2)
