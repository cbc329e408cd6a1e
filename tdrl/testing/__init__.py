"""Importable test helpers: mock envs and contract test bases."""

from tdrl.testing._compare import assert_same_data
from tdrl.testing._hostile import HostileCase, LoadAudit, buffer_cases, check_outcome, train_cases
from tdrl.testing._loss_contract import LossContract
from tdrl.testing._loss_fixtures import (
    GenericModule,
    agents_keys,
    bind_stacked,
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
    nested_key,
    perturb_,
)
from tdrl.testing._mock_envs import CountingEnv, FailingEnv, MultiKeyEnv, NestedCountingEnv
from tdrl.testing._transform_contract import (
    ENV_FACTORIES,
    EnvFactory,
    TransformContract,
    TransformTestEnv,
)
from tdrl.testing._version_policy import set_policy_version, version_policy

__all__ = [
    "ENV_FACTORIES",
    "CountingEnv",
    "EnvFactory",
    "FailingEnv",
    "GenericModule",
    "HostileCase",
    "LoadAudit",
    "LossContract",
    "MultiKeyEnv",
    "NestedCountingEnv",
    "TransformContract",
    "TransformTestEnv",
    "agents_keys",
    "assert_same_data",
    "bind_stacked",
    "buffer_cases",
    "check_outcome",
    "make_action_value_net",
    "make_categorical_actor",
    "make_deterministic_actor",
    "make_qvalue_critic",
    "make_state_value_net",
    "make_tanh_normal_actor",
    "make_transition_batch",
    "nested_key",
    "perturb_",
    "set_policy_version",
    "train_cases",
    "version_policy",
]
