"""Buffers and their parts survive pickle (Ray's transport), cloudpickle and ``copy.deepcopy``: the
copy samples what the original samples, and a checkpoint of the copy loads identically (issue 28).
"""

from __future__ import annotations

import copy
import functools
import pickle

import cloudpickle
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)

CAPACITY = 32

SAMPLERS = {
    "random": RandomSampler,
    "without_replacement": SamplerWithoutReplacement,
    "prioritized": lambda: PrioritizedSampler(CAPACITY, alpha=0.7, beta=0.5),
    "slice": lambda: SliceSampler(num_slices=2, traj_key="traj"),
    "slice_without_replacement": lambda: SliceSamplerWithoutReplacement(
        num_slices=2, traj_key="traj"
    ),
    "prioritized_slice": lambda: PrioritizedSliceSampler(
        CAPACITY, alpha=0.7, beta=0.5, num_slices=2, traj_key="traj"
    ),
}
STORAGES = {
    "list": ListStorage,
    "tensor": LazyTensorStorage,
    "memmap": LazyMemmapStorage,
}
WRITERS = {
    "round_robin": RoundRobinWriter,
    "td_round_robin": TensorDictRoundRobinWriter,
    "max_value": TensorDictMaxValueWriter,
}
COPIES = {
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
    "cloudpickle": lambda obj: cloudpickle.loads(cloudpickle.dumps(obj)),
    "deepcopy": copy.deepcopy,
}


def build(sampler: str, storage: str, writer: str) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=STORAGES[storage](CAPACITY),
        sampler=SAMPLERS[sampler](),
        writer=WRITERS[writer](),
        batch_size=6,
        generator=torch.Generator().manual_seed(3),
    )


def steps(n: int, start: int) -> TensorDict:
    i = torch.arange(start, start + n)
    reward = ((i * 7) % 11).float().unsqueeze(-1)
    return TensorDict(
        {
            "obs": i.float().unsqueeze(-1),
            "traj": i // 6,
            "next": {"done": (i % 6 == 5).unsqueeze(-1), "reward": reward},
        },
        [n],
    )


def step(rb: TensorDictReplayBuffer, prioritized: bool) -> TensorDict:
    sample = rb.sample()
    if prioritized:
        sample["td_error"] = sample["obs"].squeeze(-1) % 5 + 0.5
        rb.update_tensordict_priority(sample)
    return sample.exclude("td_error")


def assert_same(a: TensorDict, b: TensorDict, where: str) -> None:
    assert a.batch_size == b.batch_size, where
    assert set(a.keys(True, True)) == set(b.keys(True, True)), where
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), (where, key)


def run_all(buffers, prioritized, start, where):
    """Extends and samples every buffer alike; they must agree at every step."""
    first, *others = buffers
    for data in (steps(12, start), steps(6, start + 12)):
        index = first.extend(data)
        for rb in others:
            assert torch.equal(rb.extend(data), index), where
        for _ in range(3):
            expected = step(first, prioritized)
            for rb in others:
                assert_same(step(rb, prioritized), expected, where)


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("storage", sorted(STORAGES))
@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_a_copied_buffer_samples_as_the_original_and_its_checkpoint_loads(
    tmp_path, sampler, storage, writer, how
):
    prioritized = "prioritized" in sampler
    rb = build(sampler, storage, writer)
    rb.extend(steps(20, 0))
    for _ in range(2):
        step(rb, prioritized)
    other = COPIES[how](rb)
    assert other.storage is not rb.storage and len(other) == len(rb)
    run_all([rb, other], prioritized, 20, "after the copy")
    if storage == "list":
        return  # a ListStorage holds arbitrary objects and has no pickle-free checkpoint
    other.dumps(tmp_path / "ckpt")
    fresh = build(sampler, storage, writer)
    fresh.loads(tmp_path / "ckpt")
    run_all([rb, other, fresh], prioritized, 40, "after dumps/loads of the copy")


def test_a_pickled_prioritized_sampler_keeps_its_tree_in_its_state():
    """The reported case: the copy's levels were no views of its flat tree any more, so the
    state (what dumps writes) stayed all-zero while sampling used the levels."""
    for capacity in (128, 20_000):  # one level, and two (leaves and their block sums)
        sampler = pickle.loads(pickle.dumps(PrioritizedSampler(capacity, alpha=1.0, beta=1.0)))
        storage = LazyTensorStorage(capacity)
        storage.write_range(0, storage.prepare(torch.zeros(4)))
        sampler.add(storage, torch.arange(4))
        sampler.update_priority(torch.tensor([2]), 3.0)
        tree = sampler.state_dict()["sumtree"]
        assert tree[:4].tolist() == pytest.approx([1.0, 1.0, 3.0, 1.0])
        assert float(tree[capacity:].sum()) == pytest.approx(6.0 if capacity > 128 else 0.0)


def test_copies_of_a_memmap_storage_use_files_of_their_own(tmp_path):
    rb = build("random", "memmap", "round_robin")
    rb.extend(steps(8, 0))
    other = pickle.loads(pickle.dumps(rb))
    other.extend(steps(8, 100))  # written into the copy's own files
    assert rb[:]["obs"].squeeze(-1).tolist() == list(range(8))
    assert other[8:]["obs"].squeeze(-1).tolist() == list(range(100, 108))
    assert set(rb.storage._files).isdisjoint(other.storage._files)
    files = list(other.storage._files)
    del other
    import gc

    gc.collect()
    assert rb[:]["obs"].squeeze(-1).tolist() == list(range(8))  # the copy's cleanup spared them
    assert all(not __import__("os").path.exists(f) for f in files)


def test_a_list_storage_sends_each_element_alone():
    """Elements are views of the batch they came from; pickle must not send that whole batch
    once per element."""
    rb = TensorDictReplayBuffer(storage=ListStorage(1000))
    rb.extend(TensorDict(obs=torch.zeros(1000, 64), batch_size=[1000]))
    assert len(pickle.dumps(rb)) < 4 * 1000 * 64 * 3


def test_a_prioritized_buffer_as_ray_sends_it_checkpoints_identically(tmp_path):
    """RayReplayBuffer sends ``functools.partial(buffer_cls, **kwargs)`` to its actor with Ray's
    serializer (cloudpickle), so the sampler the actor uses is an unpickled copy; its
    ``dumps`` must give a checkpoint that loads into an identical buffer."""

    def make():
        return functools.partial(
            TensorDictReplayBuffer,
            storage=LazyMemmapStorage(CAPACITY),
            sampler=PrioritizedSampler(CAPACITY, alpha=0.7, beta=0.5),
            batch_size=6,
            generator=torch.Generator().manual_seed(5),
        )

    actor_side = cloudpickle.loads(cloudpickle.dumps(make()))()
    local = make()()
    for rb in (actor_side, local):
        rb.extend(steps(20, 0))
        for _ in range(3):
            step(rb, prioritized=True)
    actor_side.dumps(tmp_path / "ckpt")
    loaded = make()()
    loaded.loads(tmp_path / "ckpt")
    tree = loaded.sampler.state_dict()["sumtree"]
    assert torch.equal(tree, local.sampler.state_dict()["sumtree"]) and bool(tree[:20].gt(0).all())
    for _ in range(4):
        expected = step(local, prioritized=True)
        assert_same(step(loaded, prioritized=True), expected, "loaded")
        assert_same(step(actor_side, prioritized=True), expected, "actor side")
