"""Data kinds buffers take as TorchRL's do (issue 23): tensorclasses, dicts with tuple or int keys;
expected samples are torchrl 0.14.1's for the same seeded code."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import tensorclass

from tdrl.data import LazyMemmapStorage, LazyTensorStorage, ListStorage, ReplayBuffer
from tdrl.errors import CheckpointError


@tensorclass
class Step:
    obs: torch.Tensor
    act: torch.Tensor


@pytest.mark.parametrize("make", [ListStorage, LazyTensorStorage, LazyMemmapStorage])
def test_tensorclass_data_is_stored_and_sampled_as_tensorclass(make):
    rb = ReplayBuffer(storage=make(10), batch_size=3, generator=torch.Generator().manual_seed(0))
    index = rb.extend(Step(obs=torch.arange(4.0).view(4, 1), act=torch.arange(4), batch_size=[4]))
    assert index.tolist() == [0, 1, 2, 3]
    assert rb.add(Step(obs=torch.ones(1) * 9, act=torch.tensor(9), batch_size=[])) == 4
    sample = rb.sample()
    assert isinstance(sample, Step) and sample.batch_size == (3,)
    assert sample.obs.tolist() == [[9.0], [9.0], [3.0]] and sample.act.tolist() == [9, 9, 3]
    assert isinstance(rb[:], Step) and rb[:].act.tolist() == [0, 1, 2, 3, 9]


def test_dicts_with_tuple_and_int_keys_are_pytrees():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=3, generator=torch.Generator().manual_seed(0)
    )
    rb.extend(
        {("a", "b"): torch.arange(4), "c": torch.arange(8.0).view(4, 2), 1: torch.arange(4) * 10}
    )
    sample = rb.sample()
    assert set(sample) == {("a", "b"), "c", 1}
    assert sample[("a", "b")].tolist() == [0, 3, 1] and sample[1].tolist() == [0, 30, 10]
    assert sample["c"].tolist() == [[0.0, 1.0], [6.0, 7.0], [2.0, 3.0]]
    with pytest.raises(TypeError, match="strings, ints or tuples"):
        ReplayBuffer(storage=LazyTensorStorage(10)).extend({1.5: torch.zeros(2)})


def test_tuple_keys_and_tensorclasses_survive_checkpoints(tmp_path):
    keyed = ReplayBuffer(storage=LazyTensorStorage(10))
    keyed.extend({("a", "b"): torch.arange(4), 2: {"x": torch.ones(4, 2)}})
    keyed.dumps(tmp_path / "keyed")
    loaded = ReplayBuffer(storage=LazyTensorStorage(10))
    loaded.loads(tmp_path / "keyed")
    assert loaded[:][("a", "b")].tolist() == [0, 1, 2, 3] and loaded[:][2]["x"].shape == (4, 2)
    steps = ReplayBuffer(storage=LazyMemmapStorage(10))
    steps.extend(Step(obs=torch.zeros(3, 1), act=torch.arange(3), batch_size=[3]))
    steps.dumps(tmp_path / "steps")
    back = ReplayBuffer(storage=LazyMemmapStorage(10))
    back.loads(tmp_path / "steps")
    assert isinstance(back[:], Step) and back[:].act.tolist() == [0, 1, 2]


def test_a_tensorclass_that_is_not_imported_is_refused_without_importing(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(Step(obs=torch.zeros(3, 1), act=torch.arange(3), batch_size=[3]))
    rb.dumps(tmp_path / "ckpt")
    meta = tmp_path / "ckpt" / "storage" / "structure" / "meta.json"
    content = json.loads(meta.read_text())
    content["entries"]["tensorclass"]["value"] = "os:system"
    meta.write_text(json.dumps(content))
    with pytest.raises(CheckpointError, match=r"unknown tensorclass 'os:system'") as info:
        ReplayBuffer(storage=LazyTensorStorage(10)).loads(tmp_path / "ckpt")
    assert str(tmp_path / "ckpt") in str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (range(5), [0, 1, 2, 3, 4]),
        ((7, 8, 9), [7, 8, 9]),
        ({"a"}, ["a"]),
        ((x * 2 for x in range(3)), [0, 2, 4]),
        (["x", None], ["x", None]),
    ],
    ids=["range", "tuple", "set", "generator", "list"],
)
def test_list_storage_takes_any_iterable_of_elements(data, expected):
    rb = ReplayBuffer(storage=ListStorage(10))
    assert rb.extend(data).tolist() == list(range(len(expected)))
    assert rb[:] == expected


def test_list_storage_refuses_what_it_cannot_split():
    rb = ReplayBuffer(storage=ListStorage(10))
    for bad in ("abc", 5):
        with pytest.raises(TypeError, match="cannot split"):
            rb.extend(bad)
    rb.extend([1, 2])
    assert rb.storage._storage == [1, 2]  # TorchRL's attribute: the stored elements
