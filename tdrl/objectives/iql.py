"""TorchRL's ``torchrl.objectives.iql`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.iql import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.iql import IQLLoss
    >>> import tdrl.objectives
    >>> IQLLoss is tdrl.objectives.IQLLoss
    True
"""

from tdrl.objectives import (
    DiscreteIQLLoss,
    IQLLoss,
)

__all__ = [
    "DiscreteIQLLoss",
    "IQLLoss",
]
