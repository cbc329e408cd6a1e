"""TorchRL's ``torchrl.objectives.cql`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.cql import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.cql import CQLLoss
    >>> import tdrl.objectives
    >>> CQLLoss is tdrl.objectives.CQLLoss
    True
"""

from tdrl.objectives import (
    CQLLoss,
    DiscreteCQLLoss,
)

__all__ = [
    "CQLLoss",
    "DiscreteCQLLoss",
]
