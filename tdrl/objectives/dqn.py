"""TorchRL's ``torchrl.objectives.dqn`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives`), so code
written ``from torchrl.objectives.dqn import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.dqn import DQNLoss
    >>> import tdrl.objectives
    >>> DQNLoss is tdrl.objectives.DQNLoss
    True
"""

from tdrl.objectives import (
    DQNLoss,
)

__all__ = [
    "DQNLoss",
]
