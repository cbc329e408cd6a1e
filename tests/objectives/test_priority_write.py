"""Losses write their TD error into the input batch, as TorchRL's do (priority updates)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from tdrl.objectives import (
    CQLLoss,
    DDPGLoss,
    DQNLoss,
    IQLLoss,
    REDQLoss,
    SACLoss,
    TD3Loss,
)
from tdrl.testing import (
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
)


def _identity_dqn() -> DQNLoss:
    # Q(s, .) = s: the TD error is known from the batch alone.
    net = TensorDictModule(nn.Identity(), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="categorical", delay_value=False)
    return loss.make_value_estimator(gamma=1.0)


def test_torchrl_tutorial_pattern_updates_the_buffer_priorities():
    # TorchRL's tutorials: loss(data), then rb.update_tensordict_priority(data).
    n = 6
    targets = torch.arange(1.0, n + 1)  # Q(s, a) = 0, target = max Q(s') = k
    data = TensorDict(
        {
            "observation": torch.zeros(n, 2),
            "action": torch.zeros(n, dtype=torch.long),
            "next": {
                "observation": torch.stack([targets, torch.zeros(n)], -1),
                "reward": torch.zeros(n, 1),
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, eps=0.0, storage=LazyTensorStorage(n), batch_size=n
    )
    rb.extend(data)
    loss = _identity_dqn()
    sample = rb.sample()
    loss(sample)
    rb.update_tensordict_priority(sample)
    index = sample["index"]
    expected = sample["next", "observation"][:, 0] ** 2  # TorchRL's priority: (Q - y) ** 2
    torch.testing.assert_close(sample["td_error"], expected.unsqueeze(-1))  # DQN's [B, 1]
    torch.testing.assert_close(rb.sampler.weights(index).float(), expected)


def test_priority_key_is_followed_and_no_other_entry_is_written():
    loss = _identity_dqn().set_keys(priority="prio")
    data = TensorDict(
        {
            "observation": torch.zeros(2, 2),
            "action": torch.zeros(2, dtype=torch.long),
            "next": {
                "observation": torch.tensor([[3.0, 0.0], [1.0, 2.0]]),
                "reward": torch.ones(2, 1),
                "done": torch.zeros(2, 1, dtype=torch.bool),
            },
        },
        [2],
    )
    before = set(data.keys(True, True))
    loss(data)
    assert set(data.keys(True, True)) - before == {"prio"}
    assert data["prio"].tolist() == [[16.0], [9.0]]  # (1 + 3) ** 2, (1 + 2) ** 2; TorchRL's [B, 1]


def _constant_critics(loss, values: list[float]) -> None:
    """Zero every weight; every bias of critic ``i`` is ``values[i]``: Q_i(s, a) = values[i]."""
    params = loss.qvalue_network_params
    consts = torch.tensor(values)
    with torch.no_grad():
        for key in params.keys(True, True):
            leaf = params.get(key)
            leaf.zero_()
            name = key if isinstance(key, str) else key[-1]
            if name.endswith("bias"):
                leaf.copy_(consts.view(-1, *([1] * (leaf.ndim - 1))).expand_as(leaf))


def _terminal_batch(n: int = 5) -> TensorDict:
    # Terminal transitions: every target is the reward.
    return TensorDict(
        {
            "observation": torch.randn(n, 3),
            "action": torch.rand(n, 2) * 2 - 1,
            "next": {
                "observation": torch.randn(n, 3),
                "reward": torch.randn(n, 1),
                "done": torch.ones(n, 1, dtype=torch.bool),
                "terminated": torch.ones(n, 1, dtype=torch.bool),
            },
        },
        [n],
    )


@pytest.mark.parametrize(
    ("make", "squared"),
    [
        (lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic()), False),
        (lambda: REDQLoss(make_tanh_normal_actor(), make_qvalue_critic(), num_qvalue_nets=2), True),
        (lambda: CQLLoss(make_tanh_normal_actor(), make_qvalue_critic()), True),
        (lambda: TD3Loss(make_deterministic_actor(), make_qvalue_critic(), bounds=(-1, 1)), True),
        (
            lambda: IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net()),
            True,
        ),
    ],
)
def test_ensemble_priority_is_torchrls_largest_error(make, squared):
    # TorchRL: max over critics of (Q_i - y) ** 2 (TD3, IQL, CQL, REDQ) or |Q_i - y| (SAC).
    torch.manual_seed(0)
    loss = make()
    _constant_critics(loss, [0.5, -1.5])
    batch = _terminal_batch()
    loss(batch)
    reward = batch["next", "reward"].squeeze(-1)
    errors = torch.stack([(0.5 - reward).abs(), (-1.5 - reward).abs()]).amax(0)
    torch.testing.assert_close(batch["td_error"], errors**2 if squared else errors)


def test_ddpg_priority_is_the_squared_error():
    torch.manual_seed(0)
    loss = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())
    params = loss.value_network_params
    with torch.no_grad():
        for key in params.keys(True, True):
            leaf = params.get(key)
            leaf.fill_(0.25 if (key if isinstance(key, str) else key[-1]).endswith("bias") else 0)
    loss.reset_targets()
    batch = _terminal_batch()
    loss(batch)
    expected = (0.25 - batch["next", "reward"].squeeze(-1)) ** 2
    torch.testing.assert_close(batch["td_error"], expected)
