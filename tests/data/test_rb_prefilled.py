"""A buffer built over a storage that already holds data samples it (TorchRL's samplers read such
data): the buffer announces the prefilled elements to its sampler in storage order."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    PrioritizedSampler,
    SliceSampler,
    TensorDictReplayBuffer,
    TensorStorage,
)


def _episodes() -> TensorDict:
    episode = torch.tensor([0] * 5 + [1] * 5)
    return TensorDict({"obs": torch.arange(10.0), "episode": episode}, [10])


def test_slice_sampler_reads_prefilled_episodes() -> None:
    rb = TensorDictReplayBuffer(
        storage=TensorStorage(_episodes()),
        sampler=SliceSampler(slice_len=2, traj_key="episode"),
        batch_size=8,
        generator=torch.Generator().manual_seed(0),
    )
    for _ in range(20):
        batch = rb.sample().reshape(4, 2)
        assert (batch["episode"][:, 0] == batch["episode"][:, 1]).all()
        assert (batch["obs"][:, 1] - batch["obs"][:, 0] == 1).all()


def test_prioritized_sampler_reads_prefilled_data_with_the_default_priority() -> None:
    sampler = PrioritizedSampler(10, alpha=0.6, beta=0.4)
    rb = TensorDictReplayBuffer(storage=TensorStorage(_episodes()), sampler=sampler, batch_size=64)
    batch = rb.sample()
    assert set(batch["index"].tolist()) <= set(range(10))
    expected = (sampler.max_priority + sampler.eps) ** sampler.alpha
    torch.testing.assert_close(
        sampler.weights(torch.arange(10)), torch.full((10,), expected, dtype=torch.float64)
    )


def test_slice_sampler_reads_a_prefilled_two_env_storage_per_env() -> None:
    # collector layout [env, time]: env 0 counts 0..4, env 1 counts 100..104, one episode each
    obs = torch.stack([torch.arange(5.0), 100 + torch.arange(5.0)])
    episode = torch.stack([torch.zeros(5), torch.ones(5)]).long()
    data = TensorDict({"obs": obs, "episode": episode}, [2, 5])
    storage = LazyTensorStorage(10, ndim=2)
    TensorDictReplayBuffer(storage=storage).extend(data)  # written through another buffer
    rb = TensorDictReplayBuffer(
        storage=storage,
        sampler=SliceSampler(slice_len=3, traj_key="episode"),
        batch_size=6,
        generator=torch.Generator().manual_seed(0),
    )
    for _ in range(20):
        slices = rb.sample().reshape(2, 3)["obs"]
        assert (slices[:, 1:] - slices[:, :-1] == 1).all()


def test_an_empty_storage_announces_nothing() -> None:
    sampler = SliceSampler(slice_len=2, traj_key="episode")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=4)
    assert len(rb) == 0
    rb.extend(_episodes())  # the sampler learns the data once, at the write
    assert (rb.sample().reshape(2, 2)["obs"].diff(dim=1) == 1).all()


def test_a_transform_that_changes_the_batch_size_gets_a_clear_error() -> None:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=4, transform=lambda td: td.reshape(2, 2)
    )
    rb.extend(_episodes())
    with pytest.raises(RuntimeError, match=r"cannot write 'index'.*batch size \[2, 2\]"):
        rb.sample()
    assert len(rb) == 10  # the buffer stays usable
