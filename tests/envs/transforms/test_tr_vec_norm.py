"""VecNorm: running statistics against a plain loop, frozen mode, state dict, per-group resets."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import TransformedEnv, VecNorm
from tdrl.testing import NestedCountingEnv, TransformContract, TransformTestEnv


class TestVecNormContract(TransformContract):
    forward_mode = "custom"

    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return VecNorm(in_keys=key, decay=0.9)

    def check_forward(self, transform, base_rollout, env_rollout):
        key = transform.in_keys[0]
        before = {k: v.clone() for k, v in transform.state_dict().items()}
        out = transform(base_rollout.clone())
        mean = transform.sum_0 / transform.count_0
        var = transform.sumsq_0 / transform.count_0 - mean**2
        ref = ((base_rollout[key].double() - mean) / (var + transform.eps).sqrt()).float()
        torch.testing.assert_close(out[key], ref)
        for k, v in transform.state_dict().items():
            assert v.equal(before[k]), "forward must not update the statistics"


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
        outs.append(((x.double() - mean) / (var + eps).sqrt()).float())
    return outs


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_statistics_match_a_plain_loop(batch):
    env = TransformedEnv(TransformTestEnv(batch, max_steps=50), VecNorm(out_keys="n", decay=0.95))
    td = env.rollout(6)
    raw = [td["observation"][..., 0, :]] + [td["next", "observation"][..., t, :] for t in range(6)]
    ref = _reference(raw, 0.95, 1e-4)
    torch.testing.assert_close(td["n"][..., 0, :], ref[0])
    for t in range(6):
        torch.testing.assert_close(td["next", "n"][..., t, :], ref[t + 1])
    t = env.transform[0]
    rows = torch.cat([r.reshape(-1, 3) for r in raw]).double()
    weights = 0.95 ** torch.arange(6, -1, -1).repeat_interleave(rows.shape[0] // 7).double()
    torch.testing.assert_close(t.sum_0, (rows * weights[:, None]).sum(0))


def test_frozen_does_not_update_and_unfreeze_does():
    env = TransformedEnv(TransformTestEnv((4,)), VecNorm(out_keys="n"))
    env.rollout(3)
    t = env.transform[0].freeze()
    count = t.count_0.clone()
    env.rollout(3)
    assert t.count_0.equal(count)
    t.unfreeze()
    env.rollout(3)
    assert t.count_0.gt(count).all()


def test_state_dict_round_trip_gives_the_same_normalisation():
    env = TransformedEnv(TransformTestEnv((4,)), VecNorm(out_keys="n"))
    env.rollout(5)
    fresh = VecNorm(out_keys="n")
    fresh.load_state_dict(env.transform[0].state_dict())
    td = TensorDict(observation=torch.randn(7, 3))
    a = env.transform[0](td.clone())["n"]
    b = fresh(td.clone())["n"]
    torch.testing.assert_close(a, b)


def test_partial_reset_updates_only_with_the_reset_agent():
    env = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        VecNorm(("nested_1", "observation"), ("nested_1", "n"), decay=1.0),
    )
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    t = env.transform[0]
    count = t.count_0.clone()
    assert count.shape == (3, 1)  # per agent
    before = td["nested_1", "n"].clone()
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 2] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td)
    assert (t.count_0 - count).flatten().tolist() == [0.0, 0.0, 1.0]
    keep = ~mask.expand(2, 3, 1)
    assert out["nested_1", "n"][keep].equal(before[keep])


def test_bad_decay():
    with pytest.raises(ValueError, match="decay must be in"):
        VecNorm(decay=0.0)
