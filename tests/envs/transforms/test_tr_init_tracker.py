"""InitTracker: is_init per done group."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import InitTracker, TransformedEnv
from tdrl.testing import NestedCountingEnv, TransformContract, TransformTestEnv


class TestInitTrackerContract(TransformContract):
    forward_mode = "raises"

    def make_transform(self, layout):
        return InitTracker()


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_is_init_marks_first_steps(batch):
    env = TransformedEnv(TransformTestEnv(batch, max_steps=2), InitTracker())
    td = env.rollout(7, break_when_any_done=False)
    is_init = td["is_init"].reshape(-1, 7)
    done = td["next", "done"].reshape(-1, 7)
    for row in range(is_init.shape[0]):
        ref = [True, *done[row, :-1].tolist()]
        assert is_init[row].tolist() == ref
    assert not td["next", "is_init"].any()


def test_one_flag_per_group_and_agent():
    env = TransformedEnv(NestedCountingEnv(batch_size=(2,), max_steps=50), InitTracker("first"))
    assert env.full_observation_spec["nested_1", "first"].shape == (2, 3, 1)
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 0] = True
    td[("nested_1", "_reset")] = mask
    out = env.reset(td.clone())
    assert out["nested_1", "first"].equal(mask)
    assert not out["first"].any() and not out["nested_2", "first"].any()
