"""TorchRL's ``torchrl.data.replay_buffers.checkpointers`` import path (tdrl's checkpointer)."""

from tdrl.data.replay import H5StorageCheckpointer

__all__ = ["H5StorageCheckpointer"]
