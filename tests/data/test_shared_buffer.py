"""ReplayBuffer(shared=True): one buffer written and read by several processes (TorchRL's)."""

from __future__ import annotations

import copy
import multiprocessing as mp
import pickle
import traceback

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

JOIN = 50  # seconds: spawned children import torch, slow on a loaded machine


def _ids(start: int, n: int) -> TensorDict:
    return TensorDict({"id": torch.arange(start, start + n), "obs": torch.randn(n, 3)}, [n])


def _run(ctx: mp.context.BaseContext, target, *args) -> int:
    p = ctx.Process(target=target, args=args)
    p.start()
    p.join(JOIN)
    if p.exitcode is None:
        p.kill()
        p.join(5)
        pytest.fail("the child process did not finish in time")
    return p.exitcode


def _storage(kind: str, size: int = 200):
    return LazyTensorStorage(size) if kind == "memory" else LazyMemmapStorage(size)


@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_forked_writers_are_seen_by_the_parent_without_lost_or_duplicated_rows(kind):
    rb = TensorDictReplayBuffer(storage=_storage(kind), shared=True, batch_size=16)
    rb.extend(_ids(0, 3))
    ctx = mp.get_context("fork")

    def write(start: int) -> None:
        for k in range(10):  # many small writes interleave with the other child's
            rb.extend(_ids(start + 5 * k, 5))

    children = [ctx.Process(target=write, args=(1000 * (i + 1),)) for i in range(3)]
    for p in children:
        p.start()
    for p in children:
        p.join(JOIN)
    assert [p.exitcode for p in children] == [0, 0, 0]
    expected = set(range(3)) | {1000 * (i + 1) + j for i in range(3) for j in range(50)}
    stored = rb[:]["id"].tolist()
    assert len(rb) == rb.write_count == len(expected) == 153
    assert sorted(stored) == sorted(expected)  # each id once: no row lost or written twice
    assert rb.writer._cursor == 153  # the parent continues after the children's rows
    sample = rb.sample()
    assert set(sample["id"].tolist()) <= expected
    index = rb.extend(_ids(5000, 2))
    assert index.tolist() == [153, 154]


@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_a_spawned_process_extends_the_same_buffer(kind):
    rb = ReplayBuffer(storage=_storage(kind, 8), shared=True, batch_size=4)
    rb.extend({"id": torch.arange(6)})
    # A bound method sends the buffer itself to the child (pickled while spawning).
    assert _run(mp.get_context("spawn"), rb.extend, {"id": torch.arange(100, 104)}) == 0
    assert len(rb) == 8 and rb.write_count == 10
    assert rb[:]["id"].tolist() == [102, 103, 2, 3, 4, 5, 100, 101]  # wrapped at 8
    assert rb.extend({"id": torch.tensor([7])}).tolist() == [2]  # the shared cursor
    assert set(rb.sample()["id"].tolist()) <= {102, 103, 7, 3, 4, 5, 100, 101}


def test_a_shared_slice_sampler_sees_trajectories_written_by_other_processes():
    def traj(tid: int, n: int) -> TensorDict:
        done = torch.zeros(n, 1, dtype=torch.bool)
        done[-1] = True
        return TensorDict(
            {"tid": torch.full((n,), tid), "t": torch.arange(n), "next": {"done": done}}, [n]
        )

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(50),
        sampler=SliceSampler(slice_len=3),
        shared=True,
        batch_size=60,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(traj(0, 3))
    assert _run(mp.get_context("fork"), rb.extend, traj(1, 5)) == 0
    batch = rb.sample().view(20, 3)
    # Every slice lies inside one trajectory, in time order; both trajectories are drawn.
    assert (batch["tid"] == batch["tid"][:, :1]).all()
    assert (batch["t"].diff(dim=1) == 1).all()
    assert set(batch["tid"][:, 0].tolist()) == {0, 1}


def _child_error(rb, queue) -> None:
    try:
        rb.extend(_ids(10, 2))
    except RuntimeError:
        queue.put(traceback.format_exc())
    else:
        queue.put("no error")


@pytest.mark.parametrize(
    ("build", "part"),
    [
        (lambda: ReplayBuffer(storage=ListStorage(10), shared=True), "ListStorage"),
        (
            lambda: TensorDictPrioritizedReplayBuffer(
                alpha=0.6, beta=0.4, storage=LazyTensorStorage(10), shared=True
            ),
            "PrioritizedSampler",
        ),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(10),
                writer=TensorDictMaxValueWriter(rank_key="id"),
                shared=True,
            ),
            "TensorDictMaxValueWriter",
        ),
    ],
)
def test_parts_kept_by_one_process_are_refused_when_crossing(build, part):
    rb = build()
    rb.extend(_ids(0, 2))  # one process: a shared buffer works as any buffer (as TorchRL)
    assert len(rb) == 2
    with pytest.raises(RuntimeError, match=f"{part} cannot be shared between processes"):
        mp.get_context("spawn").Process(target=rb.extend, args=(_ids(5, 2),)).start()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    _run(ctx, _child_error, rb, queue)
    message = queue.get(timeout=JOIN)
    assert f"{part} cannot be shared between processes" in message
    assert len(rb) == 2  # nothing was written silently on one side only


def test_a_lazy_storage_must_be_allocated_before_crossing():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    with pytest.raises(RuntimeError, match=r"not allocated yet.*Extend the buffer in this process"):
        mp.get_context("spawn").Process(target=rb.extend, args=(_ids(0, 2),)).start()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    _run(ctx, _child_error, rb, queue)
    assert "LazyTensorStorage cannot be shared" in queue.get(timeout=JOIN)
    assert len(rb) == 0


def test_shared_buffers_refuse_prefetch_and_report_sharing():
    with pytest.raises(ValueError, match="prefetching buffer cannot be shared"):
        ReplayBuffer(storage=LazyTensorStorage(4), shared=True, prefetch=2, batch_size=2)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)
    assert not rb.shared
    assert rb.share() is rb and rb.shared
    rb.extend(torch.arange(3))
    assert rb.storage._bufs[0].is_shared()  # allocated while shared: in shared memory
    assert rb.share(False) is rb and not rb.shared
    assert len(rb) == 3


def test_sharing_keeps_the_data_written_before():
    rb = ReplayBuffer(storage=LazyTensorStorage(5))
    rb.extend(torch.arange(4))
    rb.share()
    assert len(rb) == 4 and rb.write_count == 4 and rb.storage._bufs[0].is_shared()
    assert _run(mp.get_context("fork"), rb.extend, torch.tensor([9, 8])) == 0
    assert rb[:].tolist() == [8, 1, 2, 3, 9] and rb.write_count == 6


@pytest.mark.parametrize("shared", [False, True])
def test_pickling_makes_an_independent_copy(shared):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), shared=shared)
    rb.extend(_ids(0, 3))
    for other in (pickle.loads(pickle.dumps(rb)), copy.deepcopy(rb)):
        assert other.shared == shared
        other.extend(_ids(100, 2))
        assert len(other) == 5 and len(rb) == 3
        assert rb[:]["id"].tolist() == [0, 1, 2]


def test_an_unshared_buffer_given_to_a_process_is_a_copy():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(2))
    assert _run(mp.get_context("fork"), rb.extend, torch.arange(3)) == 0
    assert len(rb) == 2 and rb.write_count == 2


def test_checkpoints_of_a_shared_buffer_round_trip_and_reach_other_processes(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    rb.extend(_ids(0, 4))
    assert _run(mp.get_context("fork"), rb.extend, _ids(50, 2)) == 0
    rb.dumps(tmp_path / "ckpt")
    loaded = TensorDictReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    loaded.loads(tmp_path / "ckpt")
    assert loaded[:]["id"].tolist() == [0, 1, 2, 3, 50, 51] and loaded.write_count == 6
    assert loaded.storage._bufs[0].is_shared()
    assert _run(mp.get_context("fork"), loaded.extend, _ids(70, 1)) == 0
    assert loaded[:]["id"].tolist() == [0, 1, 2, 3, 50, 51, 70]
    # Loading into a shared buffer the other processes already map updates their data.
    rb.loads(tmp_path / "ckpt")
    assert len(rb) == 6
