"""TorchRL's ``torchrl.modules.value_norm`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.modules`), so code written
``from torchrl.modules.value_norm import ...`` runs after the import swap.

Examples:
    >>> from tdrl.modules.value_norm import PopArtValueNorm
    >>> import tdrl.modules
    >>> PopArtValueNorm is tdrl.modules.PopArtValueNorm
    True
"""

from tdrl.modules import (
    PercentileValueNorm,
    PopArtValueNorm,
    RunningValueNorm,
    ValueNorm,
)

__all__ = [
    "PercentileValueNorm",
    "PopArtValueNorm",
    "RunningValueNorm",
    "ValueNorm",
]
