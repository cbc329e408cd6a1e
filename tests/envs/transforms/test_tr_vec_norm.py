"""VecNorm: running statistics against a plain loop, frozen mode, state dict, per-group resets."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import Compose, ObservationNorm, TransformedEnv, VecNorm
from tdrl.testing import NestedCountingEnv, TransformContract, TransformTestEnv


class TestVecNormContract(TransformContract):
    forward_mode = "custom"

    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return VecNorm(in_keys=key, decay=0.9)

    def check_forward(self, transform, base_rollout, env_rollout):
        # TorchRL: forward updates the statistics with the data, then normalises with them
        key = transform.in_keys[0]
        s, q, n = transform.sum_0.clone(), transform.sumsq_0.clone(), transform.count_0.clone()
        x = base_rollout[key].double()
        rows = x.reshape(-1, *s.shape)
        out = transform(base_rollout.clone())
        s = 0.9 * s + rows.sum(0)
        q = 0.9 * q + (rows * rows).sum(0)
        n = 0.9 * n + rows.shape[0]
        torch.testing.assert_close(transform.sum_0, s)
        torch.testing.assert_close(transform.count_0, n)
        mean, var = s / n, q / n - (s / n) ** 2
        std = var.clamp_min(transform.eps).sqrt()  # TorchRL's std
        torch.testing.assert_close(out[key], ((x - mean) / std).float())


def _reference(batches, decay, eps):
    """Plain loop: decayed sums over every row of every batch, normalising each batch after it."""
    s = q = n = 0.0
    outs = []
    for x in batches:
        rows = x.reshape(-1, x.shape[-1]).double()
        s = decay * s + rows.sum(0)
        q = decay * q + (rows * rows).sum(0)
        n = decay * n + rows.shape[0]
        mean = s / n
        var = q / n - mean * mean
        outs.append(((x.double() - mean) / var.clamp_min(eps).sqrt()).float())
    return outs


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_statistics_match_a_plain_loop(batch):
    env = TransformedEnv(
        TransformTestEnv(batch, max_steps=50), VecNorm("observation", "n", decay=0.95)
    )
    td = env.rollout(6)
    raw = [td["observation"][..., 0, :]] + [td["next", "observation"][..., t, :] for t in range(6)]
    ref = _reference(raw, 0.95, 1e-4)
    torch.testing.assert_close(td["n"][..., 0, :], ref[0])
    for t in range(6):
        torch.testing.assert_close(td["next", "n"][..., t, :], ref[t + 1])
    t = env.transform
    rows = torch.cat([r.reshape(-1, 3) for r in raw]).double()
    weights = 0.95 ** torch.arange(6, -1, -1).repeat_interleave(rows.shape[0] // 7).double()
    torch.testing.assert_close(t.sum_0, (rows * weights[:, None]).sum(0))


def test_frozen_does_not_update_and_unfreeze_does():
    env = TransformedEnv(TransformTestEnv((4,)), VecNorm("observation", "n"))
    env.rollout(3)
    t = env.transform.freeze()
    count = t.count_0.clone()
    env.rollout(3)
    assert t.count_0.equal(count)
    t.unfreeze()
    env.rollout(3)
    assert t.count_0.gt(count).all()


def test_state_dict_round_trip_gives_the_same_normalisation():
    env = TransformedEnv(TransformTestEnv((4,)), VecNorm("observation", "n"))
    env.rollout(5)
    fresh = VecNorm("observation", "n")
    fresh.load_state_dict(env.transform.state_dict())
    td = TensorDict(observation=torch.randn(7, 3))
    a = env.transform(td.clone())["n"]
    b = fresh(td.clone())["n"]
    torch.testing.assert_close(a, b)


def test_partial_reset_updates_with_every_row_as_torchrl():
    # TorchRL's reset updates the statistics with every row of the reset data: the rows that
    # do not reset count their current value again; their output stays the one they had
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        VecNorm(("nested_1", "observation"), ("nested_1", "n"), decay=0.5),
    )
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    t = env.transform
    count, total = t.count_0.clone(), t.sum_0.clone()
    assert count.shape == (3, 1)  # per agent
    before = td["nested_1", "n"].clone()
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 2] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td)
    # rows: [1, 1, 1] (not reset) and [1, 1, 0] (agent 2 reset to 0)
    torch.testing.assert_close(t.count_0, 0.5 * count + 2.0)
    torch.testing.assert_close(t.sum_0, 0.5 * total + torch.tensor([[2.0], [2.0], [1.0]]).double())
    keep = ~mask.expand(2, 3, 1)
    assert out["nested_1", "n"][keep].equal(before[keep])


def test_partial_reset_after_another_transform_counts_the_raw_values():
    # a transform before VecNorm keeps its output (here VecNorm's) in the rows that do not
    # reset: VecNorm counts their last un-normalised value there, as TorchRL counts the env's
    env = TransformedEnv(
        TransformTestEnv((2,), max_steps=50),
        Compose(
            ObservationNorm(loc=0.0, scale=2.0, in_keys=["observation"]),  # x * 2
            VecNorm("observation", decay=1.0),
        ),
    )
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    t = env.transform[1]
    reset_obs, step_obs = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([3.0, 5.0, -1.0])
    torch.testing.assert_close(t.sum_0, (2 * reset_obs + 2 * step_obs).double())
    td["_reset"] = torch.tensor([[True], [False]])
    env.reset(td)
    # row 0 resets (reset_obs), row 1 counts its last value (step_obs) again
    torch.testing.assert_close(t.sum_0, (3 * reset_obs + 3 * step_obs).double())
    torch.testing.assert_close(t.count_0, torch.full((3,), 6.0, dtype=torch.float64))


def test_bad_decay():
    with pytest.raises(ValueError, match="decay must be in"):
        VecNorm(decay=0.0)


def test_forward_updates_the_statistics_as_torchrl():
    t = VecNorm("x", decay=0.5)
    x = torch.tensor([[1.0, -2.0], [3.0, 2.0], [5.0, 0.0], [7.0, 4.0]])
    out = t(TensorDict(x=x.clone(), batch_size=[4]))
    torch.testing.assert_close(t.count_0, torch.full((2,), 4.0, dtype=torch.float64))
    mean, var = x.mean(0), x.var(0, unbiased=False)
    torch.testing.assert_close(out["x"], (x - mean) / var.clamp_min(1e-4).sqrt())
    y = torch.tensor([[0.0, 1.0], [2.0, 1.0]])
    t(TensorDict(x=y, batch_size=[2]))
    torch.testing.assert_close(t.sum_0, (0.5 * x.sum(0) + y.sum(0)).double())
    torch.testing.assert_close(t.count_0, torch.full((2,), 4.0, dtype=torch.float64))
    t.freeze()
    t(TensorDict(x=x, batch_size=[4]))
    torch.testing.assert_close(t.count_0, torch.full((2,), 4.0, dtype=torch.float64))


def test_default_keys_normalise_observation_and_reward_as_torchrl():
    env = TransformedEnv(TransformTestEnv((8,), max_steps=50), VecNorm(decay=1.0))
    t = env.transform
    assert t.in_keys == ["observation", "reward"]
    base = TransformTestEnv((8,), max_steps=50)
    torch.manual_seed(0)
    raw = TransformedEnv(base, VecNorm("observation", decay=1.0)).rollout(4)
    torch.manual_seed(0)
    td = env.rollout(4)
    rewards = raw["next", "reward"].double()  # [8, 4, 1]: 8 rows per step
    s = rewards.sum(0).cumsum(0)
    q = (rewards**2).sum(0).cumsum(0)
    n = 8.0 * torch.arange(1, 5, dtype=torch.float64)[:, None]
    mean, var = s / n, q / n - (s / n) ** 2
    ref = ((rewards - mean) / var.clamp_min(1e-4).sqrt()).float()
    torch.testing.assert_close(td["next", "reward"], ref)
    assert env.full_reward_spec["reward"].dtype == torch.float32
    only_obs = TransformedEnv(TransformTestEnv(), VecNorm())
    assert only_obs.transform.in_keys == ["observation", "reward"]
    out = VecNorm()(TensorDict(observation=torch.ones(3, 2), batch_size=[3]))  # no reward
    assert out["observation"].shape == (3, 2)


def test_shapes_give_the_statistics_their_shape():
    t = VecNorm("x", shapes=[(3,)], decay=1.0)
    x = torch.randn(4, 2, 3)
    out = t(TensorDict(x=x, batch_size=[4]))
    assert t.sum_0.shape == (3,)
    rows = x.reshape(-1, 3)
    ref = (x - rows.mean(0)) / rows.var(0, unbiased=False).clamp_min(1e-4).sqrt()
    torch.testing.assert_close(out["x"], ref)
    with pytest.raises(ValueError, match=r"VecNorm: shapes\[0\] is not a trailing part"):
        VecNorm("x", shapes=[(5,)])(TensorDict(x=x, batch_size=[4]))
    with pytest.raises(ValueError, match="one shape per in_key"):
        VecNorm("x", shapes=[(3,), (3,)])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shared_td": TensorDict()}, "shared_td is not supported"),
        ({"lock": object()}, "lock is not supported"),
        ({"new_api": True}, "VecNormV2 is not provided"),
    ],
)
def test_unsupported_torchrl_arguments_raise(kwargs, match):
    with pytest.raises(NotImplementedError, match=match):
        VecNorm("observation", **kwargs)


def test_one_output_per_key():
    with pytest.raises(ValueError, match=r"VecNorm.__init__: in_keys/out_keys differ in length"):
        VecNorm(["observation", "obs64"], ["x"])
