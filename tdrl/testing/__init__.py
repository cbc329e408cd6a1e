"""Importable test helpers: mock envs and contract test bases."""

from tdrl.testing._loss_contract import LossContract
from tdrl.testing._mock_envs import CountingEnv, FailingEnv, MultiKeyEnv, NestedCountingEnv

__all__ = [
    "CountingEnv",
    "FailingEnv",
    "LossContract",
    "MultiKeyEnv",
    "NestedCountingEnv",
]
