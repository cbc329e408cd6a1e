"""trajs_per_batch: batches of whole trajectories (padded or cat), replay-buffer writes,
resets, argument checks, and the multi-process collectors."""

from __future__ import annotations

import pytest
import torch

from tdrl.collectors import Collector, MultiSyncCollector
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


def _lengths() -> CountingEnv:
    """Two envs whose episodes last 2 and 3 steps."""
    return CountingEnv(batch_size=(2,), max_steps=torch.tensor([[2.0], [3.0]]))


class _Sink:
    def __init__(self):
        self.sizes: list[int] = []
        self.data: list = []
        self.write_count = 0

    def extend(self, data):
        self.sizes.append(data.shape[0])
        self.data.append(data.clone())
        self.write_count += data.shape[0]


def test_padded_batches_hold_whole_trajectories_across_batches():
    collector = Collector(
        _lengths(), frames_per_batch=4, total_frames=8, trajs_per_batch=3, traj_format="padded"
    )
    (batch,) = list(collector)  # 3 trajectories complete within the 2 batches
    assert batch.batch_size == (3, 3)
    # completion order: env 0's first (2 steps), env 1's (3 steps, over two batches), env 0's
    assert batch["collector", "mask"].sum(-1).tolist() == [2, 3, 2]
    assert batch["observation"][..., 0].tolist() == [[0, 1, 0], [0, 1, 2], [0, 1, 0]]
    assert batch["collector", "traj_ids"].tolist() == [[0, 0, 0], [1, 1, 1], [2, 2, 0]]
    done = batch["next", "done"][..., 0]
    assert done.tolist() == [[False, True, False], [False, False, True], [False, True, False]]


def test_cat_batches_put_the_trajectories_one_after_the_other():
    collector = Collector(
        _lengths(), frames_per_batch=4, total_frames=8, trajs_per_batch=2, traj_format="cat"
    )
    (batch,) = list(collector)
    assert batch.batch_size == (5,)
    assert batch["collector", "traj_ids"].tolist() == [0, 0, 1, 1, 1]
    assert batch["observation"][:, 0].tolist() == [0, 1, 0, 1, 2]
    assert ("collector", "mask") not in batch.keys(True)


@pytest.mark.parametrize(("per_write", "sizes"), [(None, [2, 5]), (1, [2, 3, 2]), (2, [2, 5])])
def test_a_replay_buffer_gets_complete_trajectories_flat(per_write, sizes):
    sink = _Sink()
    collector = Collector(
        _lengths(),
        frames_per_batch=4,
        total_frames=8,
        trajs_per_batch=3,
        trajs_per_write=per_write,
        replay_buffer=sink,
    )
    assert list(collector) == [None, None]  # one None per collected batch, as TorchRL
    assert sink.sizes == sizes
    stored = torch.cat(sink.data)
    ends = [False, True, False, False, True, False, True]  # lengths 2, 3, 2
    assert stored["next", "done"][:, 0].tolist() == ends


def test_reset_at_each_iter_drops_the_unfinished_trajectories():
    collector = Collector(
        _lengths(), frames_per_batch=4, total_frames=8, trajs_per_batch=2, reset_at_each_iter=True
    )
    (batch,) = list(collector)
    # env 1's 3-step episodes never end within a batch: only env 0's come out
    assert batch["collector", "mask"].sum(-1).tolist() == [2, 2]
    assert collector._assembler is not None and not collector._assembler.partial


def test_reset_drops_what_was_not_yielded():
    collector = Collector(_lengths(), frames_per_batch=4, trajs_per_batch=2)
    it = iter(collector)
    assert next(it).batch_size == (2, 3)
    assembler = collector._assembler
    assert assembler is not None and len(assembler.complete) == 1  # one trajectory waits
    assert list(assembler.partial) == [3]  # env 1's episode in progress
    collector.reset(index=1)  # a partial reset drops env 1's unfinished trajectory only
    assert len(assembler.complete) == 1 and not assembler.partial
    collector.reset()
    assert not assembler.complete and not assembler.partial


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"trajs_per_batch": 2, "traj_format": "flat"}, "traj_format must be 'padded' or 'cat'"),
        ({"traj_format": "cat"}, "traj_format needs trajs_per_batch"),
        ({"trajs_per_write": 2}, "trajs_per_write needs trajs_per_batch"),
        ({"trajs_per_batch": 0}, "trajs_per_batch must be a positive int"),
        ({"trajs_per_batch": 2, "trajs_per_write": -1}, "trajs_per_write must be a positive int"),
        ({"trajs_per_batch": 2, "split_trajs": True}, "split_trajs=True cannot be used"),
    ],
)
def test_trajectory_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Collector(CountingEnv(), frames_per_batch=2, **kwargs)
    with pytest.raises(ValueError, match=match):
        MultiSyncCollector([CountingEnv], frames_per_batch=2, mp_start_method="fork", **kwargs)


def test_multi_sync_assembles_the_workers_trajectories():
    with MultiSyncCollector(
        [_lengths] * 2,
        frames_per_batch=8,
        total_frames=16,
        trajs_per_batch=4,
        traj_format="padded",
        mp_start_method="fork",
    ) as collector:
        batches = list(collector)
    assert [b.batch_size for b in batches] == [torch.Size([4, 3])]
    batch = batches[0]
    lengths = batch["collector", "mask"].sum(-1)
    ids = batch["collector", "traj_ids"][:, 0]
    assert len(set(ids.tolist())) == 4  # unique across workers
    for row, n in enumerate(lengths.tolist()):
        assert batch["next", "done"][row, n - 1].all()
        assert batch["observation"][row, :n, 0].tolist() == list(range(n))
