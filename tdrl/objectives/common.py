"""TorchRL's ``torchrl.objectives.common`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.common import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.common import LossModule
    >>> import tdrl.objectives
    >>> LossModule is tdrl.objectives.LossModule
    True
"""

from tdrl.objectives import (
    LossModule,
)

__all__ = [
    "LossModule",
]
