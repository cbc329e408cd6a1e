"""StepCounter: per-group counts, truncation at max_steps, per-group resets."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import StepCounter, TransformedEnv
from tdrl.testing import NestedCountingEnv, TransformContract, TransformTestEnv


class TestStepCounterContract(TransformContract):
    forward_mode = "raises"

    def make_transform(self, layout):
        return StepCounter(max_steps=4)


class TestStepCounterNoLimitContract(TransformContract):
    forward_mode = "raises"
    layouts = ("flat",)

    def make_transform(self, layout):
        return StepCounter()


def _reference_counts(done: torch.Tensor) -> list[int]:
    """Plain loop: the count after each step, restarting after every done step."""
    out, count = [], 0
    for d in done.tolist():
        count += 1
        out.append(count)
        if d:
            count = 0
    return out


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_counts_and_truncation_match_a_plain_loop(batch):
    env = TransformedEnv(TransformTestEnv(batch, max_steps=50), StepCounter(max_steps=3))
    td = env.rollout(8, break_when_any_done=False)
    counts = td["next", "step_count"].reshape(-1, 8)
    done = td["next", "done"].reshape(-1, 8)
    trunc = td["next", "truncated"].reshape(-1, 8)
    for row in range(counts.shape[0]):
        assert counts[row].tolist() == _reference_counts(done[row])
        assert trunc[row].tolist() == [c == 3 for c in counts[row].tolist()]
    assert td["step_count"].reshape(-1, 8)[:, 0].eq(0).all()


def test_truncation_happens_at_the_step_limit_and_sets_done():
    env = TransformedEnv(TransformTestEnv(max_steps=50), StepCounter(max_steps=5))
    td = env.rollout(20)
    assert td.batch_size[-1] == 5
    assert td["next", "truncated"][-1].item() and td["next", "done"][-1].item()
    assert not td["next", "terminated"].any()


def test_update_done_false_leaves_done_alone():
    env = TransformedEnv(TransformTestEnv(max_steps=50), StepCounter(3, update_done=False))
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "truncated"][2].item()
    assert not td["next", "done"].any()


def test_groups_without_truncated_get_one():
    env = TransformedEnv(NestedCountingEnv(batch_size=(2,)), StepCounter(max_steps=2))
    assert ("nested_1", "truncated") in env.done_keys
    assert env.full_done_spec["nested_1", "truncated"].shape == (2, 3, 1)
    td = env.rollout(2, break_when_any_done=False)
    assert td["next", "nested_1", "truncated"][:, 1].all()


def test_only_the_reset_agent_restarts_its_count():
    env = TransformedEnv(NestedCountingEnv(batch_size=(2,), max_steps=50), StepCounter())
    td = env.reset()
    for _ in range(2):
        td = env.step_mdp(env.step(env.rand_action(td)))
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 2] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td.clone())
    expected = torch.full((2, 3, 1), 2)
    expected[1, 2] = 0
    assert out["nested_1", "step_count"].equal(expected)
    assert out["step_count"].eq(2).all() and out["nested_2", "step_count"].eq(2).all()


def test_root_reset_restarts_every_group_of_that_member():
    env = TransformedEnv(NestedCountingEnv(batch_size=(2,), max_steps=50), StepCounter())
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    td["_reset"] = torch.tensor([[True], [False]])
    out = env.reset(td)
    assert out["nested_1", "step_count"][0].eq(0).all()
    assert out["nested_1", "step_count"][1].eq(1).all()
    assert out["step_count"].flatten().tolist() == [0, 1]


def test_missing_count_in_the_root_names_the_transform_and_key():
    env = TransformedEnv(TransformTestEnv(), StepCounter())
    td = env.rand_action(env.reset()).exclude("step_count")
    with pytest.raises(KeyError, match=r"StepCounter._step: key 'step_count'.*available keys"):
        env.step(td)


def test_bad_max_steps():
    with pytest.raises(ValueError, match="max_steps must be positive"):
        StepCounter(0)


@pytest.mark.parametrize("max_steps", [None, 3])
def test_count_spec_is_torchrl_bounded_zero_to_int64_max(max_steps):
    env = TransformedEnv(TransformTestEnv((2,), max_steps=50), StepCounter(max_steps=max_steps))
    for spec in (env.full_observation_spec["step_count"], env.full_state_spec["step_count"]):
        assert type(spec).__name__ == "Bounded" and spec.dtype == torch.int64
        assert spec.shape == (2, 1)
        assert (spec.low == 0).all() and (spec.high == torch.iinfo(torch.int64).max).all()
