"""Replay buffer benchmarks: tdrl storages x samplers beside a hand-written plain-PyTorch baseline.

Groups ``<op>-<sampler>`` hold tdrl with the list, tensor and memmap storages and ``baseline``: a
preallocated dict of tensors used as a ring buffer (slice-copy writes, ``torch.randint`` +
``index_select`` reads) and, for prioritized sampling, a plain binary sum tree. The group
``sample32_update-prioritized`` times the prioritized training-loop step (sample, then set new
priorities), where no state cached between samples survives. Run::

    .venv/bin/python -m pytest benchmarks/test_replay_buffer.py --benchmark-enable -p no:doctest
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)

pytestmark = pytest.mark.benchmark(max_time=0.2, min_rounds=5, warmup=False)

CAPACITY, CHUNK = 10_000, 100
ALPHA, BETA = 0.7, 0.5
STORAGES = {
    "list": lambda: ListStorage(CAPACITY),
    "tensor": lambda: LazyTensorStorage(CAPACITY),
    "memmap": lambda: LazyMemmapStorage(CAPACITY),
}
SAMPLERS = {
    "random": RandomSampler,
    "without_replacement": SamplerWithoutReplacement,
    "prioritized": lambda: PrioritizedSampler(CAPACITY, ALPHA, BETA),
}


def make_chunk(seed: int = 0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(CHUNK, 4, generator=g),
            "action": torch.randn(CHUNK, 1, generator=g),
            "next": {"obs": torch.randn(CHUNK, 4, generator=g)},
            "reward": torch.randn(CHUNK, 1, generator=g),
            "done": torch.zeros(CHUNK, 1, dtype=torch.bool),
        },
        [CHUNK],
    )


def make_buffer(
    storage: str, sampler: str, fill: bool, batch_size: int = 32
) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=STORAGES[storage](),
        sampler=SAMPLERS[sampler](),
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(0),
    )
    for i in range(CAPACITY // CHUNK if fill else 1):
        rb.extend(make_chunk(i))
    return rb


class SumTree:
    """A plain binary sum tree: leaves at ``[size, 2 * size)``, one vectorised step per level."""

    def __init__(self, capacity: int) -> None:
        self.size = 1 << math.ceil(math.log2(capacity))
        self.tree = torch.zeros(2 * self.size, dtype=torch.float64)

    def update(self, index: torch.Tensor, value: torch.Tensor) -> None:
        node = index + self.size
        self.tree[node] = value
        for _ in range(int(math.log2(self.size))):
            node = node // 2
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def sample(self, n: int, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
        mass = torch.rand(n, dtype=torch.float64) * self.tree[1]
        node = torch.ones(n, dtype=torch.long)
        while int(node[0]) < self.size:
            left = self.tree[2 * node]
            right = mass >= left
            mass = torch.where(right, mass - left, mass)
            node = 2 * node + right
        weight = self.tree[node]
        # The minimum over the leaves stands in for a min tree (one reduction per batch).
        w_min = self.tree[self.size : self.size + CAPACITY].min()
        return node - self.size, (weight / w_min).pow(-beta)


class Ring:
    """The plain baseline: one preallocated tensor per key, a write cursor, uniform reads."""

    def __init__(self, prioritized: bool) -> None:
        chunk = make_chunk()
        keys = list(chunk.keys(True, True))
        self.bufs = {
            k: torch.empty(CAPACITY, *chunk[k].shape[1:], dtype=chunk[k].dtype) for k in keys
        }
        self.cursor, self.len = 0, 0
        self.tree = SumTree(CAPACITY) if prioritized else None
        self.perm, self.pos = torch.empty(0, dtype=torch.long), 0

    def extend(self, data: dict[str, torch.Tensor]) -> None:
        start, end = self.cursor, self.cursor + CHUNK  # CAPACITY is a multiple of CHUNK
        for key, buf in self.bufs.items():
            buf[start:end].copy_(data[key])
        if self.tree is not None:
            self.tree.update(torch.arange(start, end), torch.ones(CHUNK, dtype=torch.float64))
        self.cursor, self.len = end % CAPACITY, min(self.len + CHUNK, CAPACITY)

    def index(self, n: int, sampler: str) -> torch.Tensor:
        if sampler == "without_replacement":
            if self.pos + n > self.perm.numel():
                self.perm, self.pos = torch.randperm(self.len), 0
            self.pos += n
            return self.perm[self.pos - n : self.pos]
        return torch.randint(self.len, (n,))

    def sample(self, n: int, sampler: str) -> dict[str, torch.Tensor]:
        if self.tree is not None:
            index, weight = self.tree.sample(n, BETA)
            out = {k: torch.index_select(b, 0, index) for k, b in self.bufs.items()}
            out["priority_weight"] = weight
            return out
        index = self.index(n, sampler)
        return {k: torch.index_select(b, 0, index) for k, b in self.bufs.items()}


def make_ring(sampler: str, fill: bool) -> Ring:
    ring = Ring(prioritized=sampler == "prioritized")
    flat = {k: v for k, v in make_chunk().items(True, True)}
    for _ in range(CAPACITY // CHUNK if fill else 1):
        ring.extend(flat)
    return ring


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("storage", STORAGES)
def test_extend(benchmark, storage, sampler):
    benchmark.group = f"extend-{sampler}"
    rb = make_buffer(storage, sampler, fill=False)
    chunk = make_chunk(1)
    benchmark(rb.extend, chunk)
    assert len(rb) == min(CAPACITY, len(rb))


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_extend_baseline(benchmark, sampler):
    benchmark.group = f"extend-{sampler}"
    ring = make_ring(sampler, fill=False)
    flat = {k: v for k, v in make_chunk(1).items(True, True)}
    benchmark(ring.extend, flat)


@pytest.mark.parametrize("batch", [32, 256])
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("storage", STORAGES)
def test_sample(benchmark, storage, sampler, batch):
    benchmark.group = f"sample{batch}-{sampler}"
    rb = make_buffer(storage, sampler, fill=True)
    out = benchmark(rb.sample, batch)
    # Without replacement, each epoch ends with the remainder (drop_last=False, as TorchRL):
    # which call came last depends on how many rounds ran.
    allowed = {batch, CAPACITY % batch} if sampler == "without_replacement" else {batch}
    assert out.batch_size[0] in allowed


@pytest.mark.parametrize("batch", [32, 256])
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sample_baseline(benchmark, sampler, batch):
    benchmark.group = f"sample{batch}-{sampler}"
    ring = make_ring(sampler, fill=True)
    out = benchmark(ring.sample, batch, sampler)
    assert out["obs"].shape == (batch, 4)


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("storage", STORAGES)
def test_iterate(benchmark, storage, sampler):
    benchmark.group = f"iterate-{sampler}"
    rb = make_buffer(storage, sampler, fill=True)
    state = {"it": iter(rb)}

    def step():
        try:
            return next(state["it"])
        except StopIteration:  # an epoch of the sampler without replacement ended
            state["it"] = iter(rb)
            return next(state["it"])

    assert benchmark(step).batch_size[0] <= 32


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_iterate_baseline(benchmark, sampler):
    benchmark.group = f"iterate-{sampler}"
    ring = make_ring(sampler, fill=True)
    out = benchmark(ring.sample, 32, sampler)
    assert out["obs"].shape[0] == 32


@pytest.mark.parametrize("storage", STORAGES)
def test_sample_update(benchmark, storage):
    benchmark.group = "sample32_update-prioritized"
    rb = make_buffer(storage, "prioritized", fill=True)
    priority = torch.rand(32)

    def step():
        sample = rb.sample()
        rb.update_priority(sample["index"], priority)
        return sample

    assert benchmark(step).batch_size == (32,)


def test_sample_update_baseline(benchmark):
    benchmark.group = "sample32_update-prioritized"
    ring = make_ring("prioritized", fill=True)
    tree = ring.tree
    assert tree is not None
    priority = torch.rand(32, dtype=torch.float64)

    def step():
        index, _ = tree.sample(32, BETA)
        out = {k: torch.index_select(b, 0, index) for k, b in ring.bufs.items()}
        tree.update(index, priority.pow(ALPHA))
        return out

    assert benchmark(step)["obs"].shape == (32, 4)
