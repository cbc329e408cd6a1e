"""TorchRL's ``torchrl.objectives.ppo`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.ppo import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.ppo import ClipPPOLoss
    >>> import tdrl.objectives
    >>> ClipPPOLoss is tdrl.objectives.ClipPPOLoss
    True
"""

from tdrl.objectives import (
    ClipPPOLoss,
    KLPENPPOLoss,
    PPOLoss,
)

__all__ = [
    "ClipPPOLoss",
    "KLPENPPOLoss",
    "PPOLoss",
]
