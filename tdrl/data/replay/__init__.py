"""Replay buffers: storages, samplers, writers and pickle-free checkpoints.

A buffer is a :class:`Storage` (where data lives), a :class:`Sampler` (which elements a batch
holds) and a :class:`Writer` (where new data goes)::

    rb = TensorDictPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyMemmapStorage(10**6))
    rb.extend(collected)                  # a TensorDict of batch [N] (or [env, time])
    sample = rb.sample(256)               # carries "index" and "priority_weight"
    sample["td_error"] = td_error         # computed by the loss
    rb.update_tensordict_priority(sample)
    rb.dumps("ckpt/rb")                   # atomic, pickle-free; rb.loads("ckpt/rb") restores
"""

from ._buffers import ReplayBuffer
from ._h5 import H5StorageCheckpointer
from ._memmap_storage import LazyMemmapStorage
from ._prioritized import PrioritizedSampler
from ._prioritized_buffers import PrioritizedReplayBuffer, TensorDictPrioritizedReplayBuffer
from ._prioritized_slice import PrioritizedSliceSampler
from ._samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from ._slice import SliceSampler
from ._slice_without_replacement import SliceSamplerWithoutReplacement
from ._storages import ListStorage, Storage
from ._td_buffers import TensorDictReplayBuffer
from ._tensor_storages import LazyTensorStorage, TensorStorage
from ._writers import (
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = [
    "H5StorageCheckpointer",
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
