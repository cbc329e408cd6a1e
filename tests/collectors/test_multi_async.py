"""MultiAsyncCollector: per-worker batches, ids, frame counts and commands between batches."""

from __future__ import annotations

import pytest
import torch

from tdrl.collectors import MultiAsyncCollector
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


def test_batches_come_from_one_worker_each_and_continue_per_worker():
    with MultiAsyncCollector(
        [lambda: CountingEnv(batch_size=(2,), max_steps=5)] * 2,
        frames_per_batch=6,
        total_frames=60,
        mp_start_method="fork",
    ) as collector:
        per_worker: dict[int, list] = {0: [], 1: []}
        for batch in collector:
            assert batch.batch_size == (2, 3)
            (w,) = batch["collector", "worker_id"].unique().tolist()
            assert w == collector.last_worker
            per_worker[w].append(batch.clone())
        assert collector.frames == 60
    assert all(per_worker.values())
    all_ids = []
    for w, batches in per_worker.items():
        data = torch.cat(batches, -1)
        obs = data["observation"][..., 0]
        assert obs[0].tolist() == ([0, 1, 2, 3, 4] * 10)[: obs.shape[-1]]  # no step is lost
        ids = data["collector", "traj_ids"]
        assert bool((ids % 2 == w).all())
        all_ids.append(set(ids.unique().tolist()))
    assert all_ids[0].isdisjoint(all_ids[1])


def test_commands_between_batches_drop_the_batches_in_flight():
    with MultiAsyncCollector(
        [lambda: CountingEnv(max_steps=100)] * 2, frames_per_batch=3, mp_start_method="fork"
    ) as collector:
        it = iter(collector)
        first = next(it)["observation"].clone()
        # the seed is chained through both workers' envs, as through two envs in a row
        assert collector.set_seed(1) == CountingEnv().set_seed(CountingEnv().set_seed(1))
        state = collector.state_dict()
        assert state["frames"] == 3 and len(state["workers"]) == 2
        later = next(it)
        # the worker whose batch was dropped went on from where it was: no overlap, no reset
        assert later["observation"][0].item() in (0.0, 3.0, 6.0)
        assert first[0].item() == 0.0
