"""TorchRL's ``torchrl.objectives.td3_bc`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.td3_bc import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.td3_bc import TD3BCLoss
    >>> import tdrl.objectives
    >>> TD3BCLoss is tdrl.objectives.TD3BCLoss
    True
"""

from tdrl.objectives import (
    TD3BCLoss,
)

__all__ = [
    "TD3BCLoss",
]
