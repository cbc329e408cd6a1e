"""TorchRL's ``torchrl.data.replay_buffers`` import paths, for code written TorchRL's way.

``from tdrl.data.replay_buffers import ReplayBuffer`` and the ``.storages``, ``.samplers`` and
``.writers`` submodules give tdrl's own classes (the same objects as :mod:`tdrl.data`).

Examples:
    >>> from tdrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    >>> import tdrl.data
    >>> SamplerWithoutReplacement is tdrl.data.SamplerWithoutReplacement
    True
"""

from tdrl.data.replay import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.samplers import (
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from tdrl.data.replay_buffers.storages import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from tdrl.data.replay_buffers.writers import (
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = [
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "ReplayBuffer",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "Storage",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "Writer",
]
