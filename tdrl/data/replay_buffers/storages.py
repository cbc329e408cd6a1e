"""TorchRL's ``torchrl.data.replay_buffers.storages`` import path (tdrl's storages)."""

from tdrl.data.replay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)

__all__ = ["LazyMemmapStorage", "LazyTensorStorage", "ListStorage", "Storage", "TensorStorage"]
