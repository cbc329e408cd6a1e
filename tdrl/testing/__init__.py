"""Importable test helpers: mock envs and contract test bases."""

from tdrl.testing._loss_contract import LossContract
from tdrl.testing._mock_envs import CountingEnv, FailingEnv, MultiKeyEnv, NestedCountingEnv
from tdrl.testing._transform_contract import (
    ENV_FACTORIES,
    EnvFactory,
    TransformContract,
    TransformTestEnv,
)

__all__ = [
    "ENV_FACTORIES",
    "CountingEnv",
    "EnvFactory",
    "FailingEnv",
    "LossContract",
    "MultiKeyEnv",
    "NestedCountingEnv",
    "TransformContract",
    "TransformTestEnv",
]
