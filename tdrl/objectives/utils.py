"""TorchRL's ``torchrl.objectives.utils`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.utils import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.utils import SoftUpdate
    >>> import tdrl.objectives
    >>> SoftUpdate is tdrl.objectives.SoftUpdate
    True
"""

from tdrl.objectives import (
    HardUpdate,
    SoftUpdate,
    TargetNetUpdater,
    ValueEstimators,
    distance_loss,
    group_optimizers,
)

__all__ = [
    "HardUpdate",
    "SoftUpdate",
    "TargetNetUpdater",
    "ValueEstimators",
    "distance_loss",
    "group_optimizers",
]
