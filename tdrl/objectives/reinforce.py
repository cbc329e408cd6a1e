"""TorchRL's ``torchrl.objectives.reinforce`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.reinforce import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.reinforce import ReinforceLoss
    >>> import tdrl.objectives
    >>> ReinforceLoss is tdrl.objectives.ReinforceLoss
    True
"""

from tdrl.objectives import (
    ReinforceLoss,
)

__all__ = [
    "ReinforceLoss",
]
