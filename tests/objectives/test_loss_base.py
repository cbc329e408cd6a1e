"""LossModule base: keys, estimator factory, targets and updaters."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.objectives import (
    GAE,
    HardUpdate,
    LossModule,
    SoftUpdate,
    TargetNetUpdater,
    TD0Estimator,
)


class _ValueLoss(LossModule):
    @dataclasses.dataclass(frozen=True)
    class Keys:
        value: str = "state_value"
        reward: str = "reward"
        done: str = "done"
        terminated: str = "terminated"
        value_target: str = "value_target"
        advantage: str = "advantage"

    default_value_estimator = None

    def __init__(self):
        super().__init__()
        self.critic = TensorDictModule(torch.nn.Linear(2, 1), ["observation"], ["state_value"])
        self._make_target("critic")

    def _value_network_for_estimator(self):
        return self.critic

    def forward(self, td):
        value = self.critic(td.copy())["state_value"]
        return TensorDict({"loss_value": value.pow(2).mean()}, [])


def test_set_keys_validates_and_is_per_instance():
    a, b = _ValueLoss(), _ValueLoss()
    a.set_keys(value=("agents", "state_value"))
    assert a.tensor_keys.value == ("agents", "state_value")
    assert b.tensor_keys.value == "state_value"
    with pytest.raises(KeyError, match=r"unknown key name\(s\) \['nope'\]"):
        a.set_keys(nope="x")


def test_make_value_estimator_kinds_and_key_forwarding():
    loss = _ValueLoss()
    with pytest.raises(ValueError, match="no value estimator"):
        loss.make_value_estimator()
    loss.make_value_estimator("GAE", gamma=0.9, lmbda=0.8)
    assert isinstance(loss.value_estimator, GAE)
    assert loss.value_estimator.value_network is loss.critic
    loss.set_keys(reward=("agents", "reward"))
    assert loss.value_estimator.tensor_keys.reward == ("agents", "reward")
    loss.make_value_estimator("TD0", gamma=0.5, lmbda=0.3)
    assert isinstance(loss.value_estimator, TD0Estimator)
    with pytest.raises(ValueError, match="unknown estimator 'XX'"):
        loss.make_value_estimator("XX")


def test_targets_are_detached_copies_and_updaters_move_them():
    loss = _ValueLoss()
    ((live, target),) = list(loss.target_pairs())
    assert torch.equal(live["module", "weight"], target["module", "weight"])
    assert not target["module", "weight"].requires_grad
    with torch.no_grad():
        loss.critic.module.weight.add_(1.0)
    before = target["module", "weight"].clone()
    soft = SoftUpdate(loss, tau=0.25)  # as TorchRL, building an updater copies live -> target
    torch.testing.assert_close(target["module", "weight"], loss.critic.module.weight.detach())
    with torch.no_grad():
        target["module", "weight"].copy_(before)
    soft.step()
    expected = before + 0.25 * (loss.critic.module.weight - before)
    assert torch.allclose(target["module", "weight"], expected)
    hard = HardUpdate(loss, value_network_update_interval=2)
    with torch.no_grad():
        loss.critic.module.weight.add_(1.0)
    hard.step()
    assert not torch.equal(target["module", "weight"], loss.critic.module.weight)
    hard.step()
    assert torch.equal(target["module", "weight"], loss.critic.module.weight)


def test_updaters_reject_bad_arguments():
    loss = _ValueLoss()
    with pytest.raises(ValueError, match="tau must be in"):
        SoftUpdate(loss, tau=0.0)
    with pytest.raises(ValueError, match="interval must be >= 1"):
        HardUpdate(loss, value_network_update_interval=0)

    class NoTarget(LossModule):
        pass

    with pytest.raises(ValueError, match="has no target network"):
        SoftUpdate(NoTarget())


def test_target_params_used_through_to_module():
    loss = _ValueLoss()
    with torch.no_grad():
        loss.critic_target_params.zero_()
    td = TensorDict({"observation": torch.ones(3, 2)}, [3])
    with loss.critic_target_params.to_module(loss.critic):
        out = loss.critic(td.copy())["state_value"]
    assert out.abs().sum() == 0
    assert loss.critic(td.copy())["state_value"].abs().sum() > 0


def test_target_net_updater_is_the_base_of_both_updaters():
    loss = _ValueLoss()
    assert isinstance(SoftUpdate(loss, tau=0.5), TargetNetUpdater)
    assert isinstance(HardUpdate(loss), TargetNetUpdater)

    class Doubling(TargetNetUpdater):
        def _step(self, p_source, p_target):
            p_target.copy_(2 * p_source)

    updater = Doubling(loss)
    assert updater.initialized
    updater.step()
    ((live, target),) = list(loss.target_pairs())
    torch.testing.assert_close(target["module", "weight"], 2 * live["module", "weight"].detach())
    with pytest.raises(NotImplementedError, match="_step"):
        TargetNetUpdater(loss).step()


def test_hard_update_state_dict_restores_the_counter():
    loss = _ValueLoss()
    hard = HardUpdate(loss, value_network_update_interval=3)
    hard.step()
    hard.step()
    state = hard.state_dict()
    assert state == {"initialized": True, "counter": 2}
    again = HardUpdate(loss, value_network_update_interval=3)
    again.load_state_dict(state)
    with torch.no_grad():
        loss.critic.module.weight.add_(1.0)
    again.step()  # the third step since the copy: copies now
    ((live, target),) = list(loss.target_pairs())
    torch.testing.assert_close(target["module", "weight"], live["module", "weight"].detach())
