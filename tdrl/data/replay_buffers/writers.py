"""TorchRL's ``torchrl.data.replay_buffers.writers`` import path (tdrl's writers)."""

from tdrl.data.replay import (
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

__all__ = ["RoundRobinWriter", "TensorDictMaxValueWriter", "TensorDictRoundRobinWriter", "Writer"]
