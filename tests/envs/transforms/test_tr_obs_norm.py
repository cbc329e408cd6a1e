"""ObservationNorm: fixed constants, init_stats and bounded specs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import CartPoleEnv, ObservationNorm, StepCounter, TransformedEnv
from tdrl.specs import Bounded
from tdrl.testing import TransformContract, TransformTestEnv


class TestObservationNormContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return ObservationNorm(loc=0.5, scale=torch.tensor([1.0, 2.0, 4.0]), in_keys=key)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_values_match_the_formula(batch):
    loc, scale = torch.tensor([0.5, 1.0, -1.0]), torch.tensor([2.0, 4.0, 0.5])
    env = TransformedEnv(TransformTestEnv(batch), ObservationNorm(loc, scale, out_keys="n"))
    td = env.rollout(5, break_when_any_done=False)
    torch.testing.assert_close(td["n"], (td["observation"] - loc) / scale)
    torch.testing.assert_close(td["next", "n"], (td["next", "observation"] - loc) / scale)


def test_init_stats_matches_a_plain_computation():
    env = TransformedEnv(TransformTestEnv((4,)), StepCounter())
    norm = ObservationNorm(in_keys="observation", out_keys="n")
    env.append_transform(norm)
    torch.manual_seed(0)
    norm.init_stats(12)
    ref = TransformTestEnv((4,)).rollout(12, break_when_any_done=False)["observation"]
    flat = ref.reshape(-1, 3).double()
    torch.testing.assert_close(norm.loc, flat.mean(0).float())
    torch.testing.assert_close(norm.scale, flat.std(0).float())
    assert norm.loc.shape == (3,)


def test_bounded_spec_bounds_are_normalised_and_refreshed_by_init_stats():
    env = TransformedEnv(CartPoleEnv(batch_size=(8,)), ObservationNorm())
    assert env.full_observation_spec["observation"].__class__.__name__ == "Unbounded"
    env.transform[0].init_stats(20)
    env2 = TransformedEnv(
        TransformTestEnv(), ObservationNorm(loc=100.0, scale=2.0, in_keys="pixels", out_keys="p")
    )
    spec = env2.full_observation_spec["p"]
    assert (
        isinstance(spec, Bounded)
        and spec.low.max().item() == -50.0
        and spec.high.min().item() == 77.5
    )
    assert env2.reset()["p"].dtype == torch.float32


def test_uninitialised_and_bad_arguments():
    t = ObservationNorm()
    with pytest.raises(
        RuntimeError, match=r"ObservationNorm.*loc and scale are not set.*init_stats"
    ):
        t(TensorDict(observation=torch.zeros(3)))
    with pytest.raises(ValueError, match="loc and scale go together"):
        ObservationNorm(loc=1.0)
    with pytest.raises(ValueError, match="scale must be positive"):
        ObservationNorm(loc=0.0, scale=0.0)
    with pytest.raises(RuntimeError, match=r"ObservationNorm.init_stats.*not part of an env"):
        t.init_stats(3)


def test_state_dict_materialises_lazy_constants():
    src = ObservationNorm(loc=torch.ones(3), scale=torch.full((3,), 2.0))
    dst = ObservationNorm()
    dst.load_state_dict(src.state_dict())
    assert dst.initialized and dst.scale.tolist() == [2.0, 2.0, 2.0]
    out = dst(TensorDict(observation=torch.full((3,), 5.0)))
    assert out["observation"].tolist() == [2.0, 2.0, 2.0]
