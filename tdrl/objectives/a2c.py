"""TorchRL's ``torchrl.objectives.a2c`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.a2c import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.a2c import A2CLoss
    >>> import tdrl.objectives
    >>> A2CLoss is tdrl.objectives.A2CLoss
    True
"""

from tdrl.objectives import (
    A2CLoss,
)

__all__ = [
    "A2CLoss",
]
