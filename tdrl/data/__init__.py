"""tdrl.data: replay buffers and their storages, samplers and writers (see :mod:`tdrl.data.replay`),
and :class:`MultiStep` (n-step returns for collector batches)."""

from tdrl.data._multistep import MultiStep
from tdrl.data.replay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    Storage,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
    Writer,
)

__all__ = [
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "MultiStep",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "RandomSampler",
    "ReplayBuffer",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "Storage",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorStorage",
    "Writer",
]
