"""TorchRL's ``torchrl.objectives.value.advantages`` import path.

The names are tdrl's own (the same objects as in :mod:`tdrl.objectives.value`), so code
written ``from torchrl.objectives.value.advantages import ...`` runs after the import swap.

Examples:
    >>> from tdrl.objectives.value.advantages import GAE
    >>> import tdrl.objectives.value
    >>> GAE is tdrl.objectives.value.GAE
    True
"""

from tdrl.objectives.value import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
)

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "ValueEstimatorBase",
]
