"""tdrl.data: replay buffers and their storages, samplers and writers (see :mod:`tdrl.data.replay`),
and :class:`MultiStep` (n-step returns for collector batches). Offline datasets
(:class:`MinariExperienceReplay`, :class:`D4RLExperienceReplay`) live in :mod:`tdrl.data.datasets`.

The spec classes of :mod:`tdrl.specs` are re-exported here too (the same objects), as TorchRL's
``torchrl.data`` exports its specs: ``from tdrl.data import Bounded, Composite`` works.
"""

from tdrl.data._multistep import MultiStep
from tdrl.data.datasets import (
    D4RLExperienceReplay,
    ImmutableDatasetWriter,
    MinariExperienceReplay,
)
from tdrl.data.replay import (
    H5StorageCheckpointer,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
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
    "D4RLExperienceReplay",
    "H5StorageCheckpointer",
    "ImmutableDatasetWriter",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "MinariExperienceReplay",
    "MultiCategorical",
    "MultiOneHot",
    "MultiStep",
    "NonTensor",
    "OneHot",
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
