"""TorchRL buffer API: indexing, append/insert_transform, collate_fn, pin_memory, refused arguments."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.envs.transforms import Transform


def data(n: int) -> TensorDict:
    return TensorDict(
        {"obs": torch.arange(n, dtype=torch.float32), "next": {"r": torch.ones(n)}}, [n]
    )


@pytest.mark.parametrize("storage", [ListStorage, LazyTensorStorage])
def test_getitem_reads_storage_positions(storage):
    rb = TensorDictReplayBuffer(storage=storage(10))
    rb.extend(data(5))
    assert rb[3]["obs"].item() == 3.0 and rb[3].batch_size == ()
    assert rb[-1]["obs"].item() == 4.0
    assert rb[1:4]["obs"].tolist() == [1.0, 2.0, 3.0]
    assert rb[torch.tensor([4, 0])]["obs"].tolist() == [4.0, 0.0]
    assert rb[[2, 2]]["obs"].tolist() == [2.0, 2.0]
    assert rb["obs"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert rb["next", "r"].shape == (5,)
    assert rb[1:3]["index"].tolist() == [1, 2] and rb[4]["index"].item() == 4  # as TorchRL
    with pytest.raises(IndexError, match="out of range"):
        rb[5]
    with pytest.raises(TypeError, match="invalid index"):
        rb[1.5]


def test_transforms_apply_in_order_to_samples_and_getitem():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=lambda x: x + 1)
    assert rb.append_transform(lambda x: x * 10) is rb
    rb.insert_transform(0, lambda x: -x)
    rb.extend(torch.arange(3))
    assert rb[2].item() == (-2 + 1) * 10
    assert rb.storage.get(torch.tensor([2])).item() == 2  # stored data is untouched
    batch, info = rb.sample(4, return_info=True)
    assert torch.equal(batch, (-info["index"] + 1) * 10)
    assert len(rb.transform) == 3


class _Scale(Transform):
    def _apply_transform(self, value):
        return value * 2

    def _inv_apply_transform(self, value):
        return value + 100


def test_transform_inverse_runs_on_write_and_invert_swaps():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(_Scale(in_keys=["obs"], in_keys_inv=["obs"]))
    rb.extend(data(3))
    assert rb.storage.get_leaf("obs").tolist() == [100.0, 101.0, 102.0]  # inv on write
    assert rb[0]["obs"].item() == 200.0  # forward on read
    inverted = ReplayBuffer(storage=LazyTensorStorage(10))
    inverted.append_transform(lambda x: x + 1, invert=True)
    inverted.extend(torch.zeros(2))
    assert inverted.storage.get(torch.arange(2)).tolist() == [1.0, 1.0]
    assert inverted[0].item() == 1.0  # a plain callable has no inverse on read


def test_collate_fn_gets_a_list_from_list_storage_and_the_batch_otherwise():
    seen = []

    def collate(batch):
        seen.append(type(batch))
        return torch.stack(batch) if isinstance(batch, list) else batch * 0

    rb = ReplayBuffer(storage=ListStorage(10), collate_fn=collate, batch_size=3)
    rb.extend(torch.arange(5))
    assert rb.sample().shape == (3,)
    assert rb[0:2].tolist() == [0, 1]
    assert seen == [list, list]
    tensor_rb = ReplayBuffer(storage=LazyTensorStorage(10), collate_fn=collate)
    tensor_rb.extend(torch.arange(1, 5))
    assert tensor_rb.sample(2).tolist() == [0, 0]


def test_pin_memory_and_compilable():
    if torch.cuda.is_available():
        rb = ReplayBuffer(storage=LazyTensorStorage(10), pin_memory=True)
        rb.extend(torch.arange(4))
        assert rb.sample(2).is_pinned()
    else:
        with pytest.raises(RuntimeError, match="pin_memory=True needs a CUDA device"):
            ReplayBuffer(storage=LazyTensorStorage(10), pin_memory=True)
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.6, beta=0.4, compilable=True)
    assert rb.compilable


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim_extend": 1},
        {"consume_after_n_samples": 2},
        {"transport": "ray"},
        {"sample_unit": object()},
    ],
)
def test_unsupported_torchrl_arguments_are_refused(kwargs):
    (name,) = kwargs
    with pytest.raises(ValueError, match=f"{name} is not supported"):
        ReplayBuffer(**kwargs)
    with pytest.raises(ValueError, match=f"{name} is not supported"):
        TensorDictReplayBuffer(**kwargs)


def test_checkpointers_other_than_h5_are_refused():
    for build in (ReplayBuffer, TensorDictReplayBuffer):
        with pytest.raises(TypeError, match="unsupported checkpointer"):
            build(storage=LazyTensorStorage(4), checkpointer=object())


def test_prioritized_arguments_follow_torchrl():
    sampler = PrioritizedSampler(10, 0.5, 0.5, 1e-8, torch.float32, "sum")  # TorchRL positions
    assert sampler.reduction == "sum"
    with pytest.raises(ValueError, match="max_priority_within_buffer"):
        PrioritizedSampler(10, 0.5, 0.5, max_priority_within_buffer=True)
    with pytest.raises(ValueError, match="sync is not supported"):
        PrioritizedReplayBuffer(alpha=0.5, beta=0.5, sync=False)
    with pytest.raises(ValueError, match="dtype"):
        PrioritizedReplayBuffer(alpha=0.5, beta=0.5, dtype=torch.int64)
    factory_rb = ReplayBuffer(
        storage=LazyTensorStorage(4), transform_factory=lambda: lambda x: x * 3
    )
    factory_rb.extend(torch.ones(2))
    assert factory_rb[0].item() == 3.0


@pytest.mark.parametrize("cache_values", [False, True])
def test_slice_sampler_cache_values_sees_new_writes(cache_values):
    from tdrl.data import SliceSampler

    sampler = SliceSampler(slice_len=2, traj_key="traj", cache_values=cache_values)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=sampler, batch_size=4)
    rb.extend(TensorDict({"traj": torch.zeros(2, dtype=torch.long)}, [2]))
    assert set(rb.sample()["traj"].tolist()) == {0}
    rb.extend(TensorDict({"traj": torch.ones(18, dtype=torch.long)}, [18]))
    seen = {t for _ in range(20) for t in rb.sample()["traj"].tolist()}
    assert seen == {0, 1}
