"""The batch wire format of RayCollector: numpy views of a plain batch, anything else as is."""

from __future__ import annotations

import pickle

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from tdrl.distributed._wire import PackedBatch, pack, unpack


def _batch() -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(2, 3, 4),
            "action": torch.randint(0, 5, (2, 3)),
            "done": torch.rand(2, 3, 1) > 0.5,
            "next": {"observation": torch.randn(2, 3, 4), "reward": torch.randn(2, 3, 1)},
            ("agents", "obs"): torch.randn(2, 3, 2, 4).half(),
        },
        batch_size=[2, 3],
    )


def test_a_plain_batch_round_trips_with_its_keys_dtypes_and_values():
    batch = _batch()
    packed = pack(batch)
    assert isinstance(packed, PackedBatch)
    back = unpack(pickle.loads(pickle.dumps(packed)))  # what Ray's transfer amounts to
    assert back.batch_size == batch.batch_size
    assert set(back.keys(True, True)) == set(batch.keys(True, True))
    for key, value in batch.items(True, True):
        assert back.get(key).dtype == value.dtype
        assert torch.equal(back.get(key), value)


def test_packing_shares_memory_with_the_batch():
    batch = _batch()
    packed = pack(batch)
    packed.arrays[0][...] = 7  # no copy on the actor's side before Ray writes the arrays
    assert (batch.get(packed.keys[0]) == 7).all()


@pytest.mark.parametrize(
    "make",
    [
        lambda: TensorDict({"x": torch.zeros(2, dtype=torch.bfloat16)}, [2]),  # numpy lacks it
        lambda: TensorDict({"x": torch.zeros(2, requires_grad=True)}, [2]),
        lambda: LazyStackedTensorDict.lazy_stack([TensorDict({"x": torch.zeros(1)}, [])] * 2),
        lambda: {"x": torch.zeros(2)},
    ],
    ids=["bfloat16", "requires_grad", "lazy_stack", "not_a_tensordict"],
)
def test_anything_else_travels_as_it_is(make):
    batch = make()
    assert pack(batch) is batch
    assert unpack(batch) is batch
