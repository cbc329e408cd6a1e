"""TorchRL's ``torchrl.objectives.redq`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.redq import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.redq import REDQLoss
    >>> import tdrl.objectives
    >>> REDQLoss is tdrl.objectives.REDQLoss
    True
"""

from tdrl.objectives import (
    REDQLoss,
)

__all__ = [
    "REDQLoss",
]
