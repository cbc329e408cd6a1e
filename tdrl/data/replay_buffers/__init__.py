"""TorchRL's ``torchrl.data.replay_buffers`` import paths, for code written TorchRL's way.

``from tdrl.data.replay_buffers import ReplayBuffer`` and the ``.storages``, ``.samplers``,
``.writers`` and ``.checkpointers`` submodules give tdrl's own classes (the same objects as :mod:`tdrl.data`).

Examples:
    >>> from tdrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    >>> import tdrl.data
    >>> SamplerWithoutReplacement is tdrl.data.SamplerWithoutReplacement
    True
"""

from tdrl.data.replay import (
    H5StorageCheckpointer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers import checkpointers as checkpointers
from tdrl.data.replay_buffers import samplers, storages, writers
from tdrl.data.replay_buffers.samplers import *  # noqa: F403
from tdrl.data.replay_buffers.storages import *  # noqa: F403
from tdrl.data.replay_buffers.writers import *  # noqa: F403

__all__ = [
    "H5StorageCheckpointer",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    *samplers.__all__,
    *storages.__all__,
    *writers.__all__,
]
