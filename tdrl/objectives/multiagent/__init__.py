"""TorchRL's ``torchrl.objectives.multiagent`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.multiagent import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.multiagent import QMixerLoss
    >>> import tdrl.objectives
    >>> QMixerLoss is tdrl.objectives.QMixerLoss
    True
"""

from tdrl.objectives import (
    IPPOLoss,
    MAPPOLoss,
    QMixerLoss,
)

__all__ = [
    "IPPOLoss",
    "MAPPOLoss",
    "QMixerLoss",
]
