"""TorchRL's ``torchrl.objectives.decision_transformer`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.decision_transformer import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.decision_transformer import DTLoss
    >>> import tdrl.objectives
    >>> DTLoss is tdrl.objectives.DTLoss
    True
"""

from tdrl.objectives import (
    DTLoss,
    OnlineDTLoss,
)

__all__ = [
    "DTLoss",
    "OnlineDTLoss",
]
