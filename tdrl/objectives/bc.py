"""TorchRL's ``torchrl.objectives.bc`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.bc import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.bc import BCLoss
    >>> import tdrl.objectives
    >>> BCLoss is tdrl.objectives.BCLoss
    True
"""

from tdrl.objectives import (
    BCLoss,
)

__all__ = [
    "BCLoss",
]
