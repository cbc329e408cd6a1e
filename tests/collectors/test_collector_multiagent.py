"""Collectors with several done groups: partial resets, every key, trajectory ids per group."""

from __future__ import annotations

import pytest
import torch

from tdrl.collectors import Collector, MultiSyncCollector
from tdrl.envs import MultiAgentNavigationEnv
from tdrl.testing import NestedCountingEnv

IDS = ("collector", "traj_ids")


def _nested():
    return NestedCountingEnv(batch_size=(2,), max_steps=6, nested_max_steps=(2, 3), n_agents=2)


def _check_ids_follow_done(ids, done):
    """Per member (time is dim 1): the id changes exactly after a done, and is never reused."""
    same = ids[:, 1:] == ids[:, :-1]
    assert torch.equal(same, ~done[:, :-1])
    members = ids.movedim(1, -1).reshape(-1, ids.shape[1])
    for a in range(members.shape[0]):
        for b in range(a + 1, members.shape[0]):
            assert set(members[a].tolist()).isdisjoint(members[b].tolist())


def _group_done(batch, prefix):
    done = batch.get(("next", *prefix, "done"))
    return done.squeeze(-1) if done.shape[-1] == 1 else done


def test_nested_groups_get_their_own_trajectory_ids():
    batch = next(iter(Collector(_nested(), frames_per_batch=2 * 12, total_frames=24)))
    for prefix in [(), ("nested_1",), ("nested_2",)]:
        for kind in ("action",):
            assert (*prefix, kind) in batch.keys(True, True)
        for kind in ("reward", "done", "terminated"):
            assert ("next", *prefix, kind) in batch.keys(True, True)
        _check_ids_follow_done(batch.get((*prefix, *IDS)), _group_done(batch, prefix))
    # each group counts from its own resets: only the done groups were reset
    assert batch["observation"][0, :, 0].tolist() == [0, 1, 2, 3, 4, 5] * 2
    assert batch["nested_1", "observation"][0, :, 1, 0].tolist() == [0, 1, 2] * 4
    assert batch["nested_2", "observation"][0, :, 0].tolist() == [0, 1, 2] * 4
    assert batch["nested_1", IDS].shape == (2, 12, 2)


def test_state_dict_keeps_the_group_id_counters():
    collector = Collector(_nested(), frames_per_batch=8, total_frames=8)
    first = next(iter(collector)).clone()
    other = Collector(_nested(), frames_per_batch=8, total_frames=16)
    other.load_state_dict(collector.state_dict())
    second = next(iter(other))
    for prefix in [(), ("nested_1",), ("nested_2",)]:
        assert second.get((*prefix, *IDS)).min() > first.get((*prefix, *IDS)).max()


@pytest.mark.timeout(60)
def test_multi_sync_keeps_group_ids_unique_across_workers():
    with MultiSyncCollector(
        [_nested] * 2, frames_per_batch=2 * 2 * 12, total_frames=48, mp_start_method="fork"
    ) as collector:
        batch = next(iter(collector))
    assert batch.batch_size == (2, 2, 12)
    for prefix in [(), ("nested_1",), ("nested_2",)]:
        ids = batch.get((*prefix, *IDS))
        worker = torch.arange(2).reshape(2, *([1] * (ids.ndim - 1)))
        assert bool((ids % 2 == worker).all())
        _check_ids_follow_done(ids.flatten(0, 1), _group_done(batch, prefix).flatten(0, 1))
        assert ("next", *prefix, "reward") in batch.keys(True, True)


def test_navigation_agents_reset_alone():
    env = MultiAgentNavigationEnv(batch_size=(4,), n_agents=3, goal_radius=0.6, max_steps=15)
    env.set_seed(0)
    batch = next(iter(Collector(env, frames_per_batch=4 * 40, total_frames=160)))
    for key in [("agents", "action"), ("next", "agents", "reward"), ("next", "agents", "done")]:
        assert key in batch.keys(True, True)
    agent_done = batch["next", "agents", "done"][..., 0]
    root_done = batch["next", "done"][..., 0]
    assert (agent_done & ~root_done.unsqueeze(-1)).any()  # some agents finished alone
    _check_ids_follow_done(batch[("agents", *IDS)], agent_done)
    _check_ids_follow_done(batch[IDS], root_done)
    # a finished agent was reset at the next step, while its root episode went on
    follow = batch["agents", "done"][:, 1:, :, 0]
    assert not follow[agent_done[:, :-1]].any()
