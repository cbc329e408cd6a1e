"""Storages: lazy allocation, nested keys, [env, time] layouts, ring writes, bad input."""

from __future__ import annotations

import os

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)

STORAGES = {
    "list": lambda n, **kw: ListStorage(n),
    "tensor": lambda n, **kw: LazyTensorStorage(n, **kw),
    "memmap": lambda n, **kw: LazyMemmapStorage(n, **kw),
}


def make_td(n: int, start: int = 0, nested: bool = True) -> TensorDict:
    ids = torch.arange(start, start + n)
    data = {
        "obs": ids.float().unsqueeze(-1).expand(n, 3).clone(),
        "action": ids.unsqueeze(-1) % 2,
        "done": torch.zeros(n, 1, dtype=torch.bool),
    }
    if nested:
        data["next"] = {
            "obs": ids.float().unsqueeze(-1).expand(n, 3) + 1,
            "agents": {"r": ids.double()},
        }
    return TensorDict(data, [n])


@pytest.mark.parametrize("kind", STORAGES)
@pytest.mark.parametrize("nested", [False, True])
def test_td_roundtrip(kind, nested):
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](50))
    index = rb.extend(make_td(20, nested=nested))
    assert index.tolist() == list(range(20))
    got = rb.storage.get(torch.tensor([3, 17, 3]))
    assert got.batch_size == (3,)
    assert got["obs"][:, 0].tolist() == [3.0, 17.0, 3.0]
    assert got["action"].dtype == torch.long
    if nested:
        assert got["next", "agents", "r"].tolist() == [3.0, 17.0, 3.0]
        assert got["next", "agents", "r"].dtype == torch.float64


@pytest.mark.parametrize("kind", STORAGES)
@pytest.mark.parametrize(
    "data",
    [
        torch.arange(12.0).view(6, 2),
        {"a": torch.arange(6), "b": (torch.ones(6, 2), [torch.zeros(6, dtype=torch.bool)])},
    ],
    ids=["tensor", "pytree"],
)
def test_pytree_roundtrip(kind, data):
    rb = ReplayBuffer(storage=STORAGES[kind](10))
    rb.extend(data)
    got = rb.storage.get(torch.tensor([5, 0]))
    if isinstance(data, torch.Tensor):
        assert torch.equal(got, data[[5, 0]])
    else:
        assert got["a"].tolist() == [5, 0]
        assert isinstance(got["b"], tuple) and isinstance(got["b"][1], list)
        assert got["b"][0].shape == (2, 2) and got["b"][1][0].dtype == torch.bool


@pytest.mark.parametrize("kind", STORAGES)
def test_ring_wraps_and_keeps_latest(kind):
    rb = ReplayBuffer(storage=STORAGES[kind](5))
    rb.extend(torch.arange(3))
    assert rb.extend(torch.arange(3, 7)).tolist() == [3, 4, 0, 1]
    assert len(rb) == 5
    assert rb.storage.get(torch.arange(5)).tolist() == [5, 6, 2, 3, 4]
    # A batch larger than the storage keeps its last elements.
    rb.extend(torch.arange(100, 112))
    assert sorted(rb.storage.get(torch.arange(5)).tolist()) == [107, 108, 109, 110, 111]


@pytest.mark.parametrize("kind", STORAGES)
def test_add_single_element(kind):
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](4))
    rb.extend(make_td(2))
    assert int(rb.add(make_td(1, start=9)[0])) == 2
    assert rb.storage.get(torch.tensor([2]))["obs"][0, 0] == 9.0


@pytest.mark.parametrize("kind", ["tensor", "memmap"])
def test_env_time_layout(kind):
    """ndim=2: [env, time] data, time-major flat indices, ring writes along time."""
    storage = STORAGES[kind](12, ndim=2)
    rb = TensorDictReplayBuffer(storage=storage)
    n_env, steps = 3, 3
    value = torch.arange(n_env * steps).view(n_env, steps)  # env e, step t -> e * steps + t
    index = rb.extend(TensorDict({"v": value, "next": {"v": value + 100}}, [n_env, steps]))
    # As TorchRL: (time, env) coordinates of every step written, time-major.
    assert index.shape == (n_env * steps, 2) and len(rb) == 9
    assert storage.capacity == 12 and storage.slots == 4
    # Every returned index holds the element it was given for.
    assert torch.equal(storage.get(storage.ravel_index(index))["v"], value.T.reshape(-1))
    assert torch.equal(index[:, 1], torch.arange(n_env).repeat(steps))
    # Two more steps wrap around along time.
    more = torch.arange(6).view(n_env, 2) + 1000
    index = rb.extend(TensorDict({"v": more, "next": {"v": more + 100}}, [n_env, 2]))
    assert len(rb) == 12
    assert torch.equal(storage.get(storage.ravel_index(index))["v"], more.T.reshape(-1))
    sample = rb.sample(7)
    assert sample.batch_size == (7,) and sample["index"].shape == (7, 2)
    assert torch.equal(storage.get(storage.ravel_index(sample["index"]))["v"], sample["v"])


def test_env_time_pytree_and_add():
    rb = ReplayBuffer(storage=LazyTensorStorage(8, ndim=2))
    rb.extend(torch.zeros(2, 3))
    index = rb.add(torch.tensor([7.0, 8.0]))  # one step for each env
    assert index.tolist() == [[3, 0], [3, 1]]  # (time, env), as TorchRL
    assert rb.storage.get(rb.storage.ravel_index(index)).tolist() == [7.0, 8.0]


@pytest.mark.parametrize("kind", STORAGES)
@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (lambda td: td.exclude("action"), "not match"),
        (lambda td: td.set("extra", torch.zeros(td.shape[0])), "not match"),
        (lambda td: td.set("obs", torch.zeros(td.shape[0], 4)), "shape"),
        (lambda td: td.set("obs", torch.zeros(td.shape[0], 3, dtype=torch.float64)), "dtype|match"),
        (lambda td: td.set(("next", "obs"), torch.zeros(td.shape[0], 2, 3)), "shape|match"),
    ],
    ids=["missing", "extra", "shape", "dtype", "nested"],
)
def test_bad_extend_leaves_storage_unchanged(kind, bad, match):
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](20))
    rb.extend(make_td(10))
    before = rb.storage.get(torch.arange(10)).clone()
    with pytest.raises(ValueError, match=match):
        rb.extend(bad(make_td(5, start=50)))
    assert len(rb) == 10
    assert (rb.storage.get(torch.arange(10)) == before).all()
    rb.extend(make_td(5, start=50))  # the writer did not move either
    assert rb.storage.get(torch.tensor([10]))["obs"][0, 0] == 50.0


@pytest.mark.parametrize("kind", STORAGES)
def test_key_order_does_not_matter(kind):
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](10))
    rb.extend(TensorDict({"a": torch.zeros(2), "b": torch.ones(2)}, [2]))
    rb.extend(TensorDict({"b": torch.full((2,), 3.0), "a": torch.full((2,), 2.0)}, [2]))
    got = rb.storage.get(torch.tensor([2]))
    assert got["a"].item() == 2.0 and got["b"].item() == 3.0


def test_env_count_mismatch_and_too_few_dims():
    rb = ReplayBuffer(storage=LazyTensorStorage(12, ndim=2))
    rb.extend(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="env dims"):
        rb.extend(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="too few batch dims"):
        rb.extend(torch.zeros(3))
    # As TorchRL, max_size is rounded up to whole steps of every env.
    small = ReplayBuffer(storage=LazyTensorStorage(2, ndim=2))
    small.extend(torch.zeros(3, 1))
    assert small.storage.max_size == 3 and len(small) == 3


def test_non_tensor_entries_are_rejected():
    td = TensorDict({"obs": torch.zeros(2)}, [2])
    td["text"] = "hello"
    with pytest.raises(TypeError, match="not a tensor"):
        TensorDictReplayBuffer(storage=LazyTensorStorage(4)).extend(td)


def test_unsupported_pytree():
    with pytest.raises(TypeError, match="unsupported data"):
        ReplayBuffer(storage=LazyTensorStorage(4)).extend({"a": 3})


def test_list_storage_objects_and_mismatch():
    rb = ReplayBuffer(
        storage=ListStorage(5), batch_size=3, generator=torch.Generator().manual_seed(0)
    )
    rb.extend(["x", {"any": object}, 3])
    assert len(rb.sample()) == 3
    with pytest.raises(ValueError, match=r"objects cannot join|does not match"):
        rb2 = ReplayBuffer(storage=ListStorage(5))
        rb2.extend(torch.zeros(2, 3))
        rb2.extend(["x"])
    rb3 = ReplayBuffer(storage=ListStorage(5))
    rb3.extend(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="does not match"):
        rb3.extend(torch.zeros(2, 4))
    with pytest.raises(TypeError, match="cannot split"):
        rb3.extend(5)


def test_memmap_files_live_in_scratch_dir(tmp_path):
    import gc

    folder = tmp_path / "s"
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(100, scratch_dir=folder))
    rb.extend(make_td(4))
    files = sorted(os.listdir(folder))
    assert len(files) == 5 and all(f.endswith(".memmap") for f in files)
    # 100 elements x 3 float32 for "obs" (the file is sparse until written).
    obs = next(f for f in files if f.endswith("_obs.memmap"))
    assert os.path.getsize(folder / obs) == 100 * 3 * 4
    # A second storage in the same folder does not touch the first one's files.
    other = TensorDictReplayBuffer(storage=LazyMemmapStorage(100, scratch_dir=folder))
    other.extend(make_td(4, start=50))
    assert len(os.listdir(folder)) == 10
    assert rb.storage.get(torch.tensor([1]))["obs"][0, 0] == 1.0
    del rb, other
    gc.collect()
    assert os.listdir(folder) == []


def test_memmap_relayout_keeps_old_views_valid(tmp_path):
    storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
    rb = ReplayBuffer(storage=storage)
    rb.extend({"a": torch.arange(4.0)})
    old = rb.state_dict()
    other = ReplayBuffer(storage=LazyTensorStorage(10))
    other.extend({"b": torch.ones(3, 2)})
    rb.storage.load_state_dict(other.storage.state_dict())  # a new layout: new files
    assert old["storage"]["data"]["leaf0"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert len(os.listdir(tmp_path)) == 1


def test_memmap_temporary_dir_is_removed():
    storage = LazyMemmapStorage(10)
    ReplayBuffer(storage=storage).extend(torch.zeros(2))
    folder = storage.scratch_dir
    assert folder is not None and os.path.isdir(folder)
    del storage
    import gc

    gc.collect()
    assert not os.path.exists(folder)


@pytest.mark.parametrize("kind", STORAGES)
def test_empty_keeps_working(kind):
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](10), batch_size=2)
    rb.extend(make_td(4))
    rb.empty()
    assert len(rb) == 0
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample()
    rb.extend(make_td(3, start=7))
    assert rb.storage.get(torch.tensor([0]))["obs"][0, 0] == 7.0


def test_invalid_arguments():
    with pytest.raises(ValueError, match="max_size"):
        LazyTensorStorage(0)
    with pytest.raises(ValueError, match="ndim"):
        LazyTensorStorage(4, ndim=0)
    with pytest.raises(KeyError, match="no entry"):
        storage = LazyTensorStorage(4)
        ReplayBuffer(storage=storage).extend({"a": torch.zeros(2)})
        storage.get_leaf("b")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_storage():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100, device="cuda"), batch_size=8)
    rb.extend(make_td(10))
    sample = rb.sample()
    assert sample["obs"].device.type == "cuda"
    assert sample["index"].device.type == "cuda"


@pytest.mark.parametrize("kind", STORAGES)
@pytest.mark.parametrize("element_batch", [(), (2, 3)])
def test_element_batch_dims(kind, element_batch):
    """Batch dims after the first belong to each element and come back in samples (TorchRL)."""
    n = 6
    obs = torch.arange(n, dtype=torch.float32).view(n, *[1] * len(element_batch), 1)
    obs = obs.expand(n, *element_batch, 5).clone()
    data = TensorDict({"obs": obs, "next": {"obs": obs + 1}}, [n, *element_batch])
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](10), batch_size=4)
    rb.extend(data)
    sample = rb.sample()
    assert sample.batch_size == (4, *element_batch)
    assert sample["next"].batch_size == (4, *element_batch)
    assert sample["obs"].shape == (4, *element_batch, 5)
    # "index" is repeated over the element dims, one stored element per sample row.
    index = sample["index"]
    assert index.shape == (4, *element_batch)
    rows = index.reshape(4, -1)
    assert torch.equal(rows, rows[:, :1].expand_as(rows))
    first = sample["obs"].reshape(4, -1)[:, 0]
    assert torch.equal(first, rows[:, 0].float())
    rb.extend(sample)  # a sample goes back in ("index" is dropped)
    with pytest.raises(ValueError, match="too few batch dims"):  # extend needs a batch
        TensorDictReplayBuffer(storage=STORAGES[kind](10)).extend(data[(0,) * data.batch_dims])
