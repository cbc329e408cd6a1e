"""tdrl.data: replay buffers and their storages, samplers and writers (see :mod:`tdrl.data.replay`),
and :class:`MultiStep` (n-step returns for collector batches).

The spec classes of :mod:`tdrl.specs` are re-exported here too (the same objects), as TorchRL's
``torchrl.data`` exports its specs: ``from tdrl.data import Bounded, Composite`` works.
"""

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
    TensorDictRoundRobinWriter,
    TensorStorage,
    Writer,
)
from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    StackedComposite,
    TensorSpec,
    Unbounded,
)

__all__ = [
    "Binary",
    "Bounded",
    "Categorical",
    "Composite",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "MultiCategorical",
    "MultiOneHot",
    "MultiStep",
    "NonTensor",
    "OneHot",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "RandomSampler",
    "ReplayBuffer",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "StackedComposite",
    "Storage",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorSpec",
    "TensorStorage",
    "Unbounded",
    "Writer",
]
