"""TorchRL's ``torchrl.objectives.sac`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.sac import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.sac import SACLoss
    >>> import tdrl.objectives
    >>> SACLoss is tdrl.objectives.SACLoss
    True
"""

from tdrl.objectives import (
    DiscreteSACLoss,
    SACLoss,
)

__all__ = [
    "DiscreteSACLoss",
    "SACLoss",
]
