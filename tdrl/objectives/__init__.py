"""Losses, value estimators and target-network updaters."""

from tdrl.objectives._base import LossModule, normalize_key
from tdrl.objectives._targets import HardUpdate, SoftUpdate
from tdrl.objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
)

__all__ = [
    "GAE",
    "HardUpdate",
    "LossModule",
    "SoftUpdate",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "ValueEstimators",
    "normalize_key",
]
