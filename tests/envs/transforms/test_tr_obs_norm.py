"""ObservationNorm: both formulas, init_stats (reduce/cat/keep dims), the inverse, bounded specs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import CartPoleEnv, ObservationNorm, StepCounter, TransformedEnv
from tdrl.specs import Bounded
from tdrl.testing import CountingEnv, TransformContract, TransformTestEnv


class TestObservationNormContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return ObservationNorm(loc=0.5, scale=torch.tensor([1.0, 2.0, 4.0]), in_keys=key)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_default_formula_is_obs_times_scale_plus_loc(batch):
    loc, scale = torch.tensor([0.5, 1.0, -1.0]), torch.tensor([2.0, 4.0, 0.5])
    env = TransformedEnv(TransformTestEnv(batch), ObservationNorm(loc, scale, out_keys="n"))
    td = env.rollout(5, break_when_any_done=False)
    torch.testing.assert_close(td["n"], td["observation"] * scale + loc)
    torch.testing.assert_close(td["next", "n"], td["next", "observation"] * scale + loc)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_standard_normal_formula(batch):
    loc, scale = torch.tensor([0.5, 1.0, -1.0]), torch.tensor([2.0, 4.0, 0.5])
    t = ObservationNorm(loc, scale, out_keys="n", standard_normal=True)
    td = TransformedEnv(TransformTestEnv(batch), t).rollout(5, break_when_any_done=False)
    torch.testing.assert_close(td["n"], (td["observation"] - loc) / scale)
    torch.testing.assert_close(td["next", "n"], (td["next", "observation"] - loc) / scale)


def _frames(env, key, num_iter):
    """What a random rollout loop collects: rollouts (stopping at done) until num_iter frames."""
    chunks, frames = [], 0
    while frames < num_iter:
        td = env.rollout(num_iter)
        frames += td.numel()
        chunks.append(td[key])
    return chunks


def test_init_stats_defaults_reduce_dim_0_and_make_both_formulas_standardise():
    ref = torch.cat(_frames(TransformTestEnv(), "observation", 7), 0)  # [T, 3]
    mean, std = ref.mean(0), ref.std(0)
    plain = ObservationNorm(out_keys="n")
    env = TransformedEnv(TransformTestEnv(), plain)
    plain.init_stats(7)
    torch.testing.assert_close(plain.scale, 1 / std)
    torch.testing.assert_close(plain.loc, -mean / std)
    std_norm = ObservationNorm(out_keys="n", standard_normal=True)
    env = TransformedEnv(TransformTestEnv(), std_norm)
    std_norm.init_stats(7)
    assert env.transform is std_norm
    torch.testing.assert_close(std_norm.loc, mean)
    torch.testing.assert_close(std_norm.scale, std)


def test_init_stats_reduce_cat_and_keep_dims_on_a_batched_env():
    env = TransformedEnv(TransformTestEnv((4,)), StepCounter())
    norm = ObservationNorm(in_keys="observation", out_keys="n", standard_normal=True)
    env.append_transform(norm)
    norm.init_stats(30, reduce_dim=(0, 1), cat_dim=1, keep_dims=(0,))
    ref = torch.cat(_frames(TransformTestEnv((4,)), "observation", 30), 1)  # [4, T, 3]
    assert norm.loc.shape == (1, 3)
    torch.testing.assert_close(norm.loc, ref.mean((0, 1)).unsqueeze(0))
    torch.testing.assert_close(norm.scale, ref.std((0, 1)).unsqueeze(0))
    only_batch = ObservationNorm(out_keys="n", standard_normal=True)
    env = TransformedEnv(TransformTestEnv((4,)), only_batch)
    only_batch.init_stats(12)  # reduce_dim=0: the batch dim only, one constant per step
    ref = torch.cat(_frames(TransformTestEnv((4,)), "observation", 12), 0)
    torch.testing.assert_close(only_batch.loc, ref.mean(0))


def test_init_stats_argument_errors():
    env = TransformedEnv(TransformTestEnv(), ObservationNorm(in_keys=["observation", "obs64"]))
    t = env.transform
    with pytest.raises(RuntimeError, match=r"init_stats: which entry.*Pass key"):
        t.init_stats(3)
    with pytest.raises(ValueError, match=r"init_stats: cat_dim is needed"):
        t.init_stats(3, reduce_dim=(0, 1), key="observation")
    with pytest.raises(ValueError, match=r"init_stats: cat_dim must be in reduce_dim"):
        t.init_stats(3, reduce_dim=0, cat_dim=1, key="observation")
    with pytest.raises(ValueError, match=r"init_stats: keep_dims must be among reduce_dim"):
        t.init_stats(3, key="observation", keep_dims=(1,))
    t = ObservationNorm(1.0, 2.0)
    env = TransformedEnv(TransformTestEnv(), t)
    with pytest.raises(RuntimeError, match=r"init_stats: loc and scale are already set"):
        t.init_stats(3)


@pytest.mark.parametrize("standard_normal", [False, True])
def test_inverse_maps_actions_back(standard_normal):
    class Seen(CountingEnv):
        def _step(self, td):
            self.seen = td["action"].clone()
            return super()._step(td)

    t = ObservationNorm(0.5, 2.0, [], in_keys_inv="action", standard_normal=standard_normal)
    env = TransformedEnv(Seen(), t)
    outer = env.full_action_spec["action"]
    if standard_normal:  # inner = outer * 2 + 0.5, so outer = (inner - 0.5) / 2
        lo, hi = (0.0 - 0.5) / 2, (1.0 - 0.5) / 2
    else:  # inner = (outer - 0.5) / 2, so outer = inner * 2 + 0.5
        lo, hi = 0.5, 2.5
    assert outer.low.item() == lo and outer.high.item() == hi
    td = env.reset()
    td["action"] = torch.tensor([1.5 if not standard_normal else 0.1])
    env.step(td)
    expected = (1.5 - 0.5) / 2 if not standard_normal else 0.1 * 2 + 0.5
    assert env.base_env.seen.item() == pytest.approx(expected)
    assert td["action"].item() == pytest.approx(1.5 if not standard_normal else 0.1)


def test_bounded_spec_bounds_are_normalised_and_refreshed_by_init_stats():
    env = TransformedEnv(CartPoleEnv(batch_size=(8,)), ObservationNorm())
    assert env.full_observation_spec["observation"].__class__.__name__ == "Unbounded"
    env.transform.init_stats(20, reduce_dim=(0, 1), cat_dim=1)
    assert env.transform.loc.shape == (4,)
    env2 = TransformedEnv(
        TransformTestEnv(),
        ObservationNorm(100.0, 2.0, in_keys="pixels", out_keys="p", standard_normal=True),
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
    assert out["observation"].tolist() == [11.0, 11.0, 11.0]  # 5 * 2 + 1


def test_state_dict_holds_torchrl_keys_and_loading_sets_the_formula():
    # TorchRL: "standard_normal" is a buffer saved beside loc and scale
    t = ObservationNorm(1.0, 2.0, standard_normal=True)
    state = t.state_dict()
    assert list(state) == ["standard_normal", "loc", "scale"]
    assert state["standard_normal"].dtype == torch.bool and bool(state["standard_normal"])
    other = ObservationNorm(0.0, 1.0)  # obs * scale + loc
    other.load_state_dict(state)
    x = torch.tensor([5.0])
    assert other._apply_transform(x).tolist() == [2.0]  # now (x - 1) / 2
    assert other._inv_apply_transform(torch.tensor([2.0])).tolist() == [5.0]
    env = TransformedEnv(CountingEnv(max_steps=9), ObservationNorm(0.0, 1.0, out_keys="n"))
    env.load_state_dict(state)
    assert env.rollout(2)["next", "n"].flatten().tolist() == [0.0, 0.5]
