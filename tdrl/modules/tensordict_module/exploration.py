"""TorchRL's ``torchrl.modules.tensordict_module.exploration`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules`), so code
written ``from torchrl.modules.tensordict_module.exploration import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.tensordict_module.exploration import EGreedyModule
    >>> import tdrl.modules
    >>> EGreedyModule is tdrl.modules.EGreedyModule
    True
"""

from tdrl.modules import (
    AdditiveGaussianModule,
    EGreedyModule,
    OrnsteinUhlenbeckProcessModule,
)

__all__ = [
    "AdditiveGaussianModule",
    "EGreedyModule",
    "OrnsteinUhlenbeckProcessModule",
]
