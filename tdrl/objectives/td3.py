"""TorchRL's ``torchrl.objectives.td3`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.td3 import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.td3 import TD3Loss
    >>> import tdrl.objectives
    >>> TD3Loss is tdrl.objectives.TD3Loss
    True
"""

from tdrl.objectives import (
    TD3Loss,
)

__all__ = [
    "TD3Loss",
]
