"""TorchRL 0.14.1 semantics of buffers, storages, writers and samplers (issue 13)."""

from __future__ import annotations

import gc
import os

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    Storage,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
    TensorStorage,
)


def steps(n: int, **extra: torch.Tensor) -> TensorDict:
    return TensorDict({"obs": torch.arange(n, dtype=torch.float32), **extra}, [n])


# -- storages -----------------------------------------------------------------------------------


def test_tensor_storages_default_to_the_cpu_device():
    assert LazyTensorStorage(4).device == torch.device("cpu")
    assert LazyMemmapStorage(4).device == torch.device("cpu")
    auto = LazyTensorStorage(4, device="auto")
    assert auto.device is None
    auto.write_range(0, auto.prepare(torch.zeros(2, device="meta")))
    assert auto.device == torch.device("meta")  # "auto": the first data's device


def test_data_from_another_device_is_copied_to_the_storage_device():
    # The meta device stands in for a second device (CUDA data into the default CPU storage).
    storage = LazyTensorStorage(4, device="meta")
    batch = storage.prepare(TensorDict({"x": torch.zeros(2)}, [2]))
    assert batch.leaves[0].device == torch.device("meta")
    assert storage.device == torch.device("meta")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_data_lands_in_the_default_cpu_storage():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=4)
    rb.extend(TensorDict({"obs": torch.ones(6, 2, device="cuda")}, [6], device="cuda"))
    sample = rb.sample()
    assert sample["obs"].device.type == "cpu" and sample["index"].device.type == "cpu"
    auto = TensorDictReplayBuffer(storage=LazyTensorStorage(8, device="auto"), batch_size=4)
    auto.extend(TensorDict({"obs": torch.ones(6, 2, device="cuda")}, [6], device="cuda"))
    assert auto.sample()["obs"].device.type == "cuda"


def test_lazy_storage_options_tdrl_lacks_are_refused():
    for kwargs in ({"consolidated": True}, {"shared_init": True}, {"cleanup_memmap": False}):
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=f"{name} is not supported"):
            LazyTensorStorage(4, **kwargs)
    with pytest.raises(ValueError, match="shared_init is not supported"):
        LazyMemmapStorage(4, shared_init=True)
    with pytest.raises(ValueError, match="memory-mapped files live on the CPU"):
        LazyMemmapStorage(4, device="cuda")
    with pytest.raises(TypeError, match="unsupported checkpointer"):
        ListStorage(4).__class__.__mro__[1].__init__(ListStorage(4), 4, checkpointer=object())
    assert LazyTensorStorage(4, compilable=True).compilable
    assert LazyMemmapStorage(4, device="auto").device == torch.device("cpu")


def test_memmap_auto_cleanup_false_keeps_the_files(tmp_path):
    kept = LazyMemmapStorage(4, scratch_dir=tmp_path / "kept", auto_cleanup=False, existsok=True)
    kept.write_range(0, kept.prepare({"x": torch.ones(2)}))
    removed = LazyMemmapStorage(4, scratch_dir=tmp_path / "removed")
    removed.write_range(0, removed.prepare({"x": torch.ones(2)}))
    del kept, removed
    gc.collect()
    assert len(os.listdir(tmp_path / "kept")) == 1
    assert os.listdir(tmp_path / "removed") == []


def test_list_storage_without_max_size_never_overwrites():
    rb = ReplayBuffer(storage=ListStorage())
    rb.extend(torch.arange(5000))
    assert len(rb) == 5000 and rb[0].item() == 0 and not rb.storage.bounded
    for build in (
        lambda: PrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=ListStorage()),
        lambda: ReplayBuffer(storage=ListStorage(), sampler=SliceSampler(slice_len=2)),
        lambda: TensorDictReplayBuffer(storage=ListStorage(), writer=TensorDictMaxValueWriter()),
    ):
        with pytest.raises(ValueError, match=r"no size limit|needs a storage with a size limit"):
            build()


def test_list_storage_device_moves_tensor_data():
    storage = ListStorage(4, device="meta")
    storage.write_range(0, storage.prepare(torch.zeros(2)))
    assert storage.get(torch.tensor([0, 1])).device == torch.device("meta")


def test_tensor_storage_wraps_existing_data_in_place():
    data = TensorDict({"obs": torch.zeros(4, 2)}, [4])
    storage = TensorStorage(data)
    assert (len(storage), storage.max_size) == (4, 4)
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(TensorDict({"obs": torch.ones(1, 2)}, [1]))
    assert data["obs"][0].tolist() == [1.0, 1.0]  # written into the given tensors
    with pytest.raises(ValueError, match="max_size does not match"):
        TensorStorage(data, 3)
    with pytest.raises(ValueError, match="no storage and no max_size"):
        TensorStorage(None)
    with pytest.raises(NotImplementedError, match="needs ndim=1"):
        TensorStorage(data, ndim=2)


@pytest.mark.parametrize("storage", [lambda: ListStorage(5), lambda: LazyTensorStorage(5)])
def test_storage_set_writes_at_cursor(storage):
    s = storage()
    s.set(slice(0, 3), torch.tensor([1, 2, 3]))
    s.set(1, torch.tensor(9))
    s.set(torch.tensor([2, 0]), torch.tensor([7, 8]), set_cursor=False)
    assert s.get(torch.arange(3)).tolist() == [8, 9, 7]
    with pytest.raises(IndexError, match="cursor out of range"):
        s.set(5, torch.tensor(0))
    with pytest.raises(ValueError, match="does not match the cursor"):
        s.set([0, 1], torch.tensor([1, 2, 3]))


# -- buffers ------------------------------------------------------------------------------------


def test_add_returns_an_int_and_write_count_counts_elements():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(3))
    assert rb.add(TensorDict({"obs": torch.tensor(1.0)}, [])) == 0
    assert type(rb.add(TensorDict({"obs": torch.tensor(2.0)}, []))) is int
    rb.extend(steps(4))
    assert rb.write_count == 6 and len(rb) == 3
    rb.empty(empty_write_count=False)
    assert (len(rb), rb.write_count) == (0, 6)
    rb.empty()
    assert rb.write_count == 0


def test_write_count_survives_a_checkpoint(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(3))
    rb.extend(torch.arange(5))
    rb.dumps(tmp_path / "rb")
    restored = ReplayBuffer(storage=LazyTensorStorage(3))
    restored.loads(tmp_path / "rb")
    assert restored.write_count == 5
    copy = ReplayBuffer(storage=LazyTensorStorage(3))
    copy.load_state_dict(state_dict=rb.state_dict())
    assert copy.write_count == 5


def test_index_is_set_again_after_the_transforms():
    seen = []

    def drop_index(td):
        seen.append(sorted(td.keys()))
        return td.select("obs").set("obs", td["obs"] * 0)

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=drop_index)
    rb.extend(steps(4))
    sample = rb.sample(2)
    # TorchRL: the transform sees the stored "index", and the sample's index is set again
    # after the transform (which dropped it here).
    assert seen == [["index", "obs"]]
    assert sorted(sample.keys()) == ["index", "obs"] and sample["obs"].eq(0).all()


def test_extend_update_priority_switch():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, eps=0.0, storage=LazyTensorStorage(4)
    )
    rb.extend(steps(2, td_error=torch.tensor([3.0, 1.0])), update_priority=False)
    # Without the priority update both elements have the initial max priority 1.
    assert rb.sampler._sum.total() == pytest.approx(2.0)
    rb.extend(steps(2, td_error=torch.tensor([3.0, 1.0])))
    assert rb.sampler._sum.total() == pytest.approx(2.0 + 3.0 + 1.0)
    with pytest.raises(NotImplementedError, match="update_priority is not supported"):
        ReplayBuffer(storage=LazyTensorStorage(4)).extend(torch.zeros(2), update_priority=True)


def test_setitem_overwrites_elements_through_the_inverse_transforms():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(4))
    rb[0] = torch.tensor(10)
    rb[[1, -1]] = torch.tensor([11, 13])
    rb[2:3] = torch.tensor([12])
    assert rb[:].tolist() == [10, 11, 12, 13]
    with pytest.raises(IndexError, match="out of range"):
        rb[4] = torch.tensor(0)
    with pytest.raises(TypeError, match="writing one entry"):
        rb["obs"] = torch.zeros(4)


def test_sample_takes_return_info_positionally():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(torch.arange(4))
    data, info = rb.sample(3, True)
    assert torch.equal(data, info["index"])


# -- writers and samplers -----------------------------------------------------------------------


def test_writers_take_torchrl_arguments():
    assert RoundRobinWriter(True).compilable
    with pytest.raises(ValueError, match="track_generations is not supported"):
        RoundRobinWriter(track_generations=True)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=TensorDictRoundRobinWriter())
    assert rb.extend(steps(3)).tolist() == [0, 1, 0]
    writer = TensorDictMaxValueWriter("score", "max")
    assert (writer.rank_key, writer.reduction) == ("score", "max")
    assert TensorDictMaxValueWriter().rank_key == ("next", "reward")  # TorchRL's default


def test_sampler_without_replacement_positional_arguments():
    sampler = SamplerWithoutReplacement(True, False)
    assert (sampler.drop_last, sampler.shuffle) == (True, False)


def test_prioritized_sampler_update_priority_checks_the_storage():
    storage, sampler = LazyTensorStorage(8), PrioritizedSampler(8, 1.0, 1.0)
    storage.write_range(0, storage.prepare(torch.zeros(2)))
    with pytest.raises(IndexError, match="index out of range"):
        sampler.update_priority(torch.tensor([5]), 1.0, storage=storage)
    sampler.update_priority(torch.tensor([5]), 1.0)  # within max_capacity


def _episodes(n: int = 12, length: int = 4, **extra: torch.Tensor) -> TensorDict:
    done = (torch.arange(n) % length == length - 1).unsqueeze(-1)
    return TensorDict(
        {"obs": torch.arange(n), "next": {"done": done, "terminated": done.clone()}, **extra}, [n]
    )


def test_slice_sampler_marks_slice_ends_as_torchrl():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20), sampler=SliceSampler(slice_len=2), batch_size=6
    )
    rb.extend(_episodes())
    sample = rb.sample()
    truncated = sample["next", "truncated"].reshape(3, 2)
    assert truncated[:, 1].all() and not truncated[:, 0].any()  # last step of every slice
    stored_done = (sample["obs"] % 4 == 3).reshape(3, 2)
    assert torch.equal(sample["next", "done"].reshape(3, 2), stored_done | truncated)
    assert torch.equal(sample["next", "terminated"].reshape(3, 2), stored_done)


def test_slice_sampler_marks_slice_starts_in_the_stored_init_flag():
    init = (torch.arange(12) % 4 == 0).unsqueeze(-1)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20), sampler=SliceSampler(num_slices=2), batch_size=4
    )
    rb.extend(_episodes(is_init=init))
    flags = rb.sample()["is_init"].reshape(2, 2)
    assert flags[:, 0].all()  # every slice start, OR-ed with the stored flags
    plain = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SliceSampler(num_slices=2, truncated_key=None, init_key=None),
        batch_size=4,
    )
    plain.extend(_episodes(is_init=init))
    sample = plain.sample()
    assert "truncated" not in sample["next"].keys()
    assert torch.equal(sample["is_init"], sample["obs"].unsqueeze(-1) % 4 == 0)


def test_slice_sampler_end_keys_are_or_ed():
    n = 8
    truncated = (torch.arange(n) == 1).unsqueeze(-1)
    done = (torch.arange(n) == 5).unsqueeze(-1)
    data = TensorDict({"obs": torch.arange(n), "next": {"done": done, "truncated": truncated}}, [n])
    sampler = SliceSampler(
        slice_len=2,
        end_keys=[("next", "done"), ("next", "truncated"), ("next", "missing")],
        strict_length=True,
    )
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=200)
    rb.extend(data)
    pairs = {tuple(p) for p in rb.sample()["obs"].reshape(-1, 2).tolist()}
    # Trajectories [0, 1], [2..5], [6, 7]: no slice crosses 1|2 or 5|6.
    assert pairs <= {(0, 1), (2, 3), (3, 4), (4, 5), (6, 7)} and (1, 2) not in pairs
    with pytest.raises(ValueError, match="exclusive"):
        SliceSampler(slice_len=2, end_key="a", end_keys=["b"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"fragmented": True},
        {"ends": torch.ones(2, dtype=torch.bool)},
        {"trajectories": torch.zeros(2)},
        {"pad_output": True},
        {"span": True},
    ],
)
def test_slice_sampler_refuses_options_tdrl_lacks(kwargs):
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} is not supported"):
        SliceSampler(slice_len=2, **kwargs)


def test_storage_base_accepts_compilable():
    class Minimal(ListStorage):
        pass

    assert Minimal(3, compilable=True).compilable and isinstance(Minimal(3), Storage)


# -- ndim > 1 storages (issue 23) ---------------------------------------------------------------


@pytest.mark.parametrize("make", [LazyTensorStorage, LazyMemmapStorage])
def test_env_time_storages_behave_as_torchrl(make):
    """Every expected value below is what torchrl 0.14.1 gives for the same seeded code."""
    rb = TensorDictReplayBuffer(
        storage=make(10, ndim=2), batch_size=5, generator=torch.Generator().manual_seed(7)
    )
    index = rb.extend(TensorDict(obs=torch.arange(12.0).view(3, 4), batch_size=[3, 4]))
    assert index.tolist() == [[t, e] for t in range(4) for e in range(3)]
    # max_size 10 over 3 envs: 4 time steps each, max_size becomes 12.
    storage = rb.storage
    assert (storage.max_size, len(storage), len(rb)) == (12, 12, 12)
    assert storage.shape == (4, 3) and rb[:].shape == (3, 4)
    assert rb[:]["obs"].tolist() == [
        [0.0, 1.0, 2.0, 3.0],
        [4.0, 5.0, 6.0, 7.0],
        [8.0, 9.0, 10.0, 11.0],
    ]
    assert rb[:]["index"].tolist() == [[0, 1, 2, 3]] * 3  # the time slot TorchRL stores
    rb.extend(TensorDict(obs=100 + torch.arange(6.0).view(3, 2), batch_size=[3, 2]))
    assert len(rb) == 12
    wrapped = [[100.0, 101.0, 2.0, 3.0], [102.0, 103.0, 6.0, 7.0], [104.0, 105.0, 10.0, 11.0]]
    assert rb[:]["obs"].tolist() == wrapped and rb[1:]["obs"].tolist() == wrapped[1:]
    sample = rb.sample()
    assert sample["index"].tolist() == [[3, 0], [0, 2], [1, 2], [2, 1], [3, 2]]
    assert sample["obs"].tolist() == [3.0, 104.0, 105.0, 6.0, 11.0]
    assert storage._storage.shape == (4, 3)  # TorchRL's attribute: [time, env], all slots
    assert storage._storage["obs"][0].tolist() == [100.0, 102.0, 104.0]
    plain = ReplayBuffer(
        storage=make(7, ndim=2), batch_size=4, generator=torch.Generator().manual_seed(1)
    )
    plain.extend(torch.arange(6).view(2, 3))
    assert plain.add(torch.tensor([10, 20])).tolist() == [[3, 0], [3, 1]]
    assert plain[:].tolist() == [[0, 1, 2, 10], [3, 4, 5, 20]]
    assert (len(plain), plain.storage.max_size) == (8, 8)
    data, info = plain.sample(return_info=True)
    assert data.tolist() == [4, 20, 3, 3]
    assert [t.tolist() for t in info["index"]] == [[1, 3, 0, 0], [1, 1, 1, 1]]


def test_env_time_priorities_take_the_sample_coordinates():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(8, ndim=2),
        sampler=PrioritizedSampler(8, alpha=1.0, beta=1.0),
        batch_size=4,
    )
    rb.extend(TensorDict(obs=torch.arange(6).view(2, 3), batch_size=[2, 3]))
    sample = rb.sample()
    sample["td_error"] = torch.zeros(4)
    rb.update_tensordict_priority(sample)
    rb.update_priority(torch.tensor([[2, 1]]), torch.tensor([5.0]))  # time 2 of env 1
    assert rb.sampler.weights(torch.tensor([5])).item() == pytest.approx(5.0)
    rb.update_priority(
        (torch.tensor([0]), torch.tensor([1])), torch.tensor([2.0])
    )  # TorchRL's tuple
    assert rb.sampler.weights(torch.tensor([1])).item() == pytest.approx(2.0)


def test_a_prioritized_sampler_smaller_than_a_rounded_up_storage_is_refused():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10, ndim=2), sampler=PrioritizedSampler(10, 1.0, 1.0)
    )
    with pytest.raises(ValueError, match="max_capacity=12"):
        rb.extend(torch.zeros(3, 4))  # 4 steps of 3 envs: 12 elements
