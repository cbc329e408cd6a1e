"""The losses' set_keys take TorchRL 0.14.1's key names, with TorchRL's defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tdrl.objectives import (
    CQLLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    DQNLoss,
    IQLLoss,
    REDQLoss,
    SACLoss,
)
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
)

# TorchRL 0.14.1's _AcceptedKeys defaults (with tensordict's default composite_lp_aggregate=False)
TORCHRL_KEYS: dict[str, dict[str, str]] = {
    "CQLLoss": {
        "action": "action",
        "value": "state_value",
        "state_action_value": "state_action_value",
        "log_prob": "_log_prob",
        "pred_q1": "pred_q1",
        "pred_q2": "pred_q2",
        "priority": "td_error",
        "cql_q1_loss": "cql_q1_loss",
        "cql_q2_loss": "cql_q2_loss",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    },
    "DQNLoss": {
        "advantage": "advantage",
        "value_target": "value_target",
        "value": "chosen_action_value",
        "action_value": "action_value",
        "action": "action",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "priority_weight": "priority_weight",
    },
    "DiscreteCQLLoss": {
        "value_target": "value_target",
        "value": "chosen_action_value",
        "action_value": "action_value",
        "action": "action",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "pred_val": "pred_val",
    },
    "DiscreteIQLLoss": {
        "value": "state_value",
        "action": "action",
        "log_prob": "_log_prob",
        "priority": "td_error",
        "state_action_value": "state_action_value",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    },
    "DiscreteSACLoss": {
        "action": "action",
        "value": "state_value",
        "action_value": "action_value",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "log_prob": "log_prob",
        "priority_weight": "priority_weight",
    },
    "IQLLoss": {
        "value": "state_value",
        "action": "action",
        "log_prob": "_log_prob",
        "priority": "td_error",
        "state_action_value": "state_action_value",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    },
    "REDQLoss": {
        "action": "action",
        "value": "state_value",
        "sample_log_prob": "action_log_prob",
        "priority": "td_error",
        "state_action_value": "state_action_value",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
    },
    "SACLoss": {
        "action": "action",
        "value": "state_value",
        "state_action_value": "state_action_value",
        "log_prob": "action_log_prob",
        "priority": "td_error",
        "reward": "reward",
        "done": "done",
        "terminated": "terminated",
        "priority_weight": "priority_weight",
    },
}

MAKE: dict[str, Callable[[], Any]] = {
    "CQLLoss": lambda: CQLLoss(make_tanh_normal_actor(), make_qvalue_critic()),
    "DQNLoss": lambda: DQNLoss(make_action_value_net(), action_space="one_hot"),
    "DiscreteCQLLoss": lambda: DiscreteCQLLoss(make_action_value_net(), action_space="one_hot"),
    "DiscreteIQLLoss": lambda: DiscreteIQLLoss(
        make_categorical_actor(), make_action_value_net(), make_state_value_net()
    ),
    "DiscreteSACLoss": lambda: DiscreteSACLoss(
        make_categorical_actor(), make_action_value_net(), num_actions=2
    ),
    "IQLLoss": lambda: IQLLoss(
        make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net()
    ),
    "REDQLoss": lambda: REDQLoss(make_tanh_normal_actor(), make_qvalue_critic()),
    "SACLoss": lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic()),
}


@pytest.mark.parametrize("name", sorted(TORCHRL_KEYS))
def test_torchrl_key_names_and_defaults(name: str) -> None:
    loss = MAKE[name]()
    keys = loss.tensor_keys
    for key, default in TORCHRL_KEYS[name].items():
        assert getattr(keys, key) == default, (name, key)
    # every TorchRL name goes through set_keys and is kept
    renamed = {key: ("x", f"my_{key}") for key in TORCHRL_KEYS[name]}
    loss.set_keys(**renamed)
    for key, value in renamed.items():
        assert getattr(loss.tensor_keys, key) == value, (name, key)


@pytest.mark.parametrize("name", ["DQNLoss", "DiscreteCQLLoss", "SACLoss", "DiscreteSACLoss"])
def test_estimator_keys_are_forwarded_to_the_value_estimator(name: str) -> None:
    loss = MAKE[name]()
    loss.make_value_estimator()
    assert loss.value_estimator.tensor_keys.value == TORCHRL_KEYS[name]["value"]
    names = [k for k in ("advantage", "value", "value_target") if k in TORCHRL_KEYS[name]]
    loss.set_keys(**{k: f"new_{k}" for k in names})
    for k in names:
        assert getattr(loss.value_estimator.tensor_keys, k) == f"new_{k}"


def test_sac_takes_the_log_prob_key_from_the_actor() -> None:
    # TorchRL's SACLoss reads the actor's log_prob_keys at construction
    loss = SACLoss(make_tanh_normal_actor(nested=True), make_qvalue_critic(nested=True))
    assert loss.tensor_keys.log_prob == ("agents", "action_log_prob")
    cql = CQLLoss(make_tanh_normal_actor(nested=True), make_qvalue_critic(nested=True))
    assert cql.tensor_keys.log_prob == "_log_prob"  # TorchRL's CQL keeps its own


def test_redq_has_torchrl_keys_only() -> None:
    loss = MAKE["REDQLoss"]()
    assert {f.name for f in dataclasses.fields(loss.tensor_keys)} - {"priority_weight"} == set(
        TORCHRL_KEYS["REDQLoss"]
    )
    with pytest.raises(KeyError, match="log_prob"):
        loss.set_keys(log_prob="lp")
