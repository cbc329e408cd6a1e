"""Value estimation: pure functions (:mod:`.functional`) and the estimator modules.

Examples:
    >>> from tdrl.objectives.value import GAE, functional
    >>> GAE(gamma=0.99, lmbda=0.95).tensor_keys.advantage
    'advantage'
"""

from tdrl.objectives.value import functional
from tdrl.objectives.value._base import ValueEstimatorBase, ValueKeys
from tdrl.objectives.value._estimators import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
)
from tdrl.objectives.value._multiagent import MultiAgentGAE

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "ValueEstimatorBase",
    "ValueEstimators",
    "ValueKeys",
    "functional",
]
