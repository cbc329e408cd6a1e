"""TorchRL's ``torchrl.objectives.ddpg`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.ddpg import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.ddpg import DDPGLoss
    >>> import tdrl.objectives
    >>> DDPGLoss is tdrl.objectives.DDPGLoss
    True
"""

from tdrl.objectives import (
    DDPGLoss,
)

__all__ = [
    "DDPGLoss",
]
