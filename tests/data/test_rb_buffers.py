"""Replay buffer API: sampling formats, transforms, iteration, prefetch, argument errors."""

from __future__ import annotations

import itertools
import threading

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


def td(n: int, start: int = 0) -> TensorDict:
    x = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict({"obs": x.unsqueeze(-1), "next": {"obs": x.unsqueeze(-1) + 1}}, [n])


def test_default_components():
    rb = ReplayBuffer()
    assert isinstance(rb.storage, ListStorage) and rb.storage.max_size == 1000
    assert isinstance(rb.sampler, RandomSampler)
    assert "ReplayBuffer(storage=ListStorage(max_size=1000)" in repr(rb)


def test_sample_returns_info_on_request():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    rb.extend({"a": torch.arange(5)})
    data, info = rb.sample(return_info=True)
    assert torch.equal(data["a"], info["index"])  # element i holds i


def test_td_sample_carries_index_and_matches_storage():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=6, generator=torch.Generator().manual_seed(0)
    )
    rb.extend(td(8))
    sample = rb.sample()
    assert sample.batch_size == (6,)
    assert torch.equal(sample["obs"].squeeze(-1), sample["index"].float())
    with pytest.raises(TypeError, match="expected a TensorDict"):
        rb.extend(torch.zeros(3))


def test_transform_applies_to_samples_only():
    calls = []

    def transform(data: TensorDict) -> TensorDict:
        calls.append(len(data))
        return data.set("obs", data["obs"] * 10)

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=transform, batch_size=2)
    rb.extend(td(4, start=1))
    assert (rb.sample()["obs"] >= 10).all()
    assert rb.storage.get(torch.arange(4))["obs"].max() == 4.0
    assert calls == [2]


def test_transform_module():
    class Scale(torch.nn.Module):
        def forward(self, data: TensorDict) -> TensorDict:
            return data.set("scaled", data["obs"] * 2)

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), transform=Scale(), batch_size=2)
    rb.extend(td(3))
    assert "scaled" in rb.sample().keys()


def test_batch_size_errors_and_iteration_requirements():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(3))
    with pytest.raises(ValueError, match="no batch size"):
        rb.sample()
    with pytest.raises(RuntimeError, match="no batch size"):
        next(iter(rb))
    with pytest.raises(ValueError, match="batch_size"):
        rb.sample(0)
    with pytest.raises(ValueError, match="prefetch"):
        ReplayBuffer(prefetch=0)
    with pytest.raises(ValueError, match="prefetch needs a batch size"):
        ReplayBuffer(prefetch=2)
    with pytest.raises(TypeError, match="storage"):
        ReplayBuffer(storage=RandomSampler())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="generator"):
        ReplayBuffer(generator=0)  # type: ignore[arg-type]


def test_iteration_with_random_sampler_is_endless():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    rb.extend(torch.arange(3))
    assert len(list(itertools.islice(rb, 25))) == 25


def test_generator_makes_sampling_reproducible():
    def run(seed):
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.7,
            beta=0.5,
            storage=LazyTensorStorage(50),
            batch_size=8,
            generator=torch.Generator().manual_seed(seed),
        )
        rb.extend(td(50))
        out = []
        for _ in range(5):
            sample = rb.sample()
            sample["td_error"] = sample["obs"].squeeze(-1) % 7
            rb.update_tensordict_priority(sample)
            out.append(sample["index"])
        return torch.stack(out)

    assert torch.equal(run(0), run(0)) and not torch.equal(run(0), run(1))


@pytest.mark.timeout(30)
def test_prefetch_matches_direct_sampling():
    def batches(prefetch):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(40),
            sampler=SamplerWithoutReplacement(),
            batch_size=8,
            prefetch=prefetch,
            generator=torch.Generator().manual_seed(0),
        )
        rb.extend(torch.arange(40))
        out = [rb.sample() for _ in range(12)]
        rb.close()
        return torch.stack(out)

    assert torch.equal(batches(None), batches(3))


@pytest.mark.timeout(30)
def test_prefetch_iteration_stops_at_epoch_end():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(40), sampler=SamplerWithoutReplacement(), batch_size=8, prefetch=2
    )
    rb.extend(torch.arange(20))
    with rb:
        epoch = list(rb)
        assert sorted(torch.cat(epoch).tolist()) == list(range(20))
        assert [len(b) for b in epoch] == [8, 8, 4]
        with pytest.raises(ValueError, match="its own batch size"):
            rb.sample(3)
    assert rb._prefetcher is None


@pytest.mark.timeout(30)
def test_prefetch_reraises_thread_errors_and_recovers():
    class Boom(RuntimeError):
        pass

    state = {"fail": True}

    def transform(data):
        if state["fail"]:
            raise Boom("transform failed")
        return data

    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=transform, batch_size=2, prefetch=2)
    rb.extend(torch.arange(5))
    with pytest.raises(Boom, match="transform failed"):
        rb.sample()
    state["fail"] = False
    assert rb.sample().shape == (2,)  # a fresh thread serves the next call
    thread = rb._prefetcher._thread
    rb.empty()
    assert not thread.is_alive() and len(rb) == 0
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample()
    rb.close()
    rb.close()  # idempotent


@pytest.mark.timeout(30)
def test_concurrent_extend_and_sample():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(500), batch_size=16, prefetch=2)
    rb.extend(td(10))
    errors = []

    def writer():
        try:
            for i in range(50):
                rb.extend(td(10, start=100 * i))
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    thread = threading.Thread(target=writer)
    thread.start()
    for _ in range(50):
        sample = rb.sample()
        assert torch.equal(sample["next", "obs"], sample["obs"] + 1)
    thread.join(10)
    rb.close()
    assert not errors and len(rb) == 500


@pytest.mark.timeout(30)
def test_unreferenced_prefetching_buffer_stops_its_thread():
    import gc

    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=2)
    rb.extend(torch.arange(5))
    rb.sample()
    thread = rb._prefetcher._thread
    del rb
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def test_update_priority_index_out_of_range():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(10, 0.5, 0.5))
    rb.extend(torch.arange(3))
    with pytest.raises(IndexError, match="out of range"):
        rb.update_priority(torch.tensor([3]), torch.tensor([1.0]))


_EXIT_SCRIPT = """
import torch
from tensordict import TensorDict
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4000), batch_size=512, prefetch=4)
rb.extend(TensorDict({"obs": torch.randn(4000, 3, 16, 16)}, [4000]))
rb.cycle = rb  # a reference cycle: the buffer is only collected while the interpreter exits
rb.sample()
print("sampled")
"""


@pytest.mark.timeout(120)
def test_prefetching_buffer_left_open_at_exit_does_not_abort():
    # Without the exit hook the prefetch thread is still inside a torch op when the interpreter
    # finalises, and the process aborts ("terminate called without an active exception").
    import subprocess
    import sys

    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, timeout=100
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "sampled"
        assert "terminate called" not in done.stderr and "Fatal Python error" not in done.stderr


def test_components_may_be_given_as_factories_as_in_torchrl():
    """TorchRL builds a storage, sampler or writer given as a class or a no-argument callable."""
    import functools

    from tdrl.data import (
        LazyMemmapStorage,
        PrioritizedReplayBuffer,
        RoundRobinWriter,
        TensorDictMaxValueWriter,
    )

    rb = ReplayBuffer(
        storage=functools.partial(LazyTensorStorage, 10),
        sampler=SamplerWithoutReplacement,
        writer=RoundRobinWriter,
        batch_size=3,
    )
    assert isinstance(rb.storage, LazyTensorStorage) and rb.storage.max_size == 10
    assert isinstance(rb.sampler, SamplerWithoutReplacement)
    assert isinstance(rb.writer, RoundRobinWriter)
    rb.extend(torch.arange(5))
    assert sorted(torch.cat([batch for batch in rb]).tolist()) == [0, 1, 2, 3, 4]
    prioritized = ReplayBuffer(
        storage=functools.partial(LazyMemmapStorage, 8),
        sampler=functools.partial(PrioritizedSampler, 8, alpha=1.0, beta=1.0),
        writer=functools.partial(TensorDictMaxValueWriter, rank_key="r"),
    )
    assert isinstance(prioritized.sampler, PrioritizedSampler)
    assert prioritized.writer.rank_key == "r"
    built = PrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=functools.partial(LazyTensorStorage, 12)
    )
    assert built.storage.max_size == 12 and built.sampler.max_capacity == 12


def test_factories_that_cannot_build_a_component_are_refused():
    with pytest.raises(TypeError, match=r"sampler factory PrioritizedSampler cannot be called"):
        ReplayBuffer(sampler=PrioritizedSampler)  # needs max_capacity, alpha and beta
    with pytest.raises(TypeError, match=r"storage factory LazyTensorStorage cannot be called"):
        ReplayBuffer(storage=LazyTensorStorage)
    with pytest.raises(TypeError, match=r"writer factory <lambda> returned a RandomSampler"):
        ReplayBuffer(writer=lambda: RandomSampler())
    with pytest.raises(TypeError, match=r"invalid storage \(got int"):
        ReplayBuffer(storage=5)
