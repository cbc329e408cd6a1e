"""Batch ownership: iterating a collector yields batches the caller owns (TorchRL's default);
``return_same_td=True`` yields the collector's own memory, the same TensorDict every time."""

from __future__ import annotations

import pytest
import torch

from tdrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)

T = 4  # steps per batch and worker


def _env():
    return CountingEnv(max_steps=1000)  # never done within the test: obs counts 0, 1, 2, ...


def _make(kind: str, **kwargs):
    if kind == "single":
        return Collector(_env(), frames_per_batch=T, total_frames=3 * T, **kwargs)
    if kind == "sync":
        return MultiSyncCollector(
            [_env] * 2, frames_per_batch=2 * T, total_frames=6 * T, mp_start_method="fork", **kwargs
        )
    return MultiAsyncCollector(
        [_env] * 2, frames_per_batch=T, total_frames=6 * T, mp_start_method="fork", **kwargs
    )


def _rows(batch) -> list[list[float]]:
    """The observation sequence of each worker/env row of a batch."""
    return batch["observation"][..., 0].reshape(-1, T).tolist()


@pytest.mark.parametrize("kind", ["single", "sync", "async"])
def test_list_of_batches_keeps_every_batch(kind):
    with _make(kind) as collector:
        batches = list(collector)
    # each row counts on from where its previous batch stopped: row k of batch i holds
    # [i*T, ..., i*T + T - 1] (per worker for the async collector)
    starts: dict[int, list[int]] = {}
    for batch in batches:
        workers = batch.get(("collector", "worker_id"), None)
        wid = -1 if workers is None or kind != "async" else int(workers.flatten()[0])
        for row in _rows(batch):
            assert row == [row[0] + t for t in range(T)]
        starts.setdefault(wid, []).append(int(_rows(batch)[0][0]))
    for found in starts.values():
        assert found == [i * T for i in range(len(found))]
    ptrs = {b["observation"].data_ptr() for b in batches}
    assert len(ptrs) == len(batches)


@pytest.mark.parametrize("kind", ["single", "sync", "async"])
def test_writes_into_a_batch_never_reach_another(kind):
    with _make(kind) as collector:
        earlier = []
        for batch in collector:
            assert "advantage" not in batch.keys()
            assert bool((batch["observation"] >= 0).all())
            for old in earlier:  # in-place writes into earlier batches leave this one intact
                old["observation"].fill_(-1.0)
            assert bool((batch["observation"] >= 0).all())
            batch["advantage"] = torch.ones(batch.batch_size)  # as a loss module would
            earlier.append(batch)
    assert len(earlier) == 3 if kind != "async" else len(earlier) == 6


@pytest.mark.parametrize("kind", ["single", "sync"])
def test_return_same_td_yields_the_same_tensordict(kind):
    with _make(kind, return_same_td=True) as collector:
        it = iter(collector)
        first = next(it)
        first_rows = _rows(first)
        second = next(it)
        assert second is first
        # overwritten in place by the second batch
        assert _rows(second)[0][0] == first_rows[0][0] + T


def test_return_same_td_async_yields_one_tensordict_per_worker():
    with _make("async", return_same_td=True) as collector:
        seen: dict[int, object] = {}
        for batch in collector:
            wid = int(batch["collector", "worker_id"].flatten()[0])
            assert seen.setdefault(wid, batch) is batch


def test_return_same_td_refuses_a_replay_buffer():
    with pytest.raises(ValueError, match="return_same_td=True cannot be used with a replay_buffer"):
        Collector(_env(), frames_per_batch=T, return_same_td=True, replay_buffer=[])
