"""TorchRL's ``torchrl.objectives.multiagent.mappo`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.multiagent.mappo import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.multiagent.mappo import IPPOLoss, MAPPOLoss
    >>> import tdrl.objectives
    >>> MAPPOLoss is tdrl.objectives.MAPPOLoss and IPPOLoss is tdrl.objectives.IPPOLoss
    True
"""

from tdrl.objectives import (
    IPPOLoss,
    MAPPOLoss,
)

__all__ = [
    "IPPOLoss",
    "MAPPOLoss",
]
