"""TorchRL's ``torchrl.modules.models.models`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules.models`), so code
written ``from torchrl.modules.models.models import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.models.models import MLP
    >>> import tdrl.modules.models
    >>> MLP is tdrl.modules.models.MLP
    True
"""

from tdrl.modules.models import (
    MLP,
    ConvNet,
    DTActor,
    DuelingCnnDQNet,
    DuelingMlpDQNet,
    OnlineDTActor,
)

__all__ = [
    "MLP",
    "ConvNet",
    "DTActor",
    "DuelingCnnDQNet",
    "DuelingMlpDQNet",
    "OnlineDTActor",
]
