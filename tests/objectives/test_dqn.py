"""DQNLoss: contract, numerics against a plain implementation, masks, estimators, smoke test."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import CartPoleEnv
from tdrl.modules import MLP, QValueActor
from tdrl.objectives import DQNLoss, HardUpdate, SoftUpdate
from tdrl.objectives.value import functional
from tdrl.specs import Categorical, OneHot
from tdrl.testing import GenericModule, LossContract, make_transition_batch, nested_key

OBS, ACT, B = 4, 3, 6


def make_net(nested=False):
    net = nn.Sequential(nn.Linear(OBS, 16), nn.Tanh(), nn.Linear(16, ACT))
    return TensorDictModule(
        net, [nested_key(nested, "observation")], [nested_key(nested, "action_value")]
    )


def make_batch(nested=False, batch=(B,), one_hot=True):
    td = make_transition_batch(nested, batch, obs=OBS, act=ACT, action="index")
    if one_hot:
        key = nested_key(nested, "action")
        td.set(key, nn.functional.one_hot(td.get(key), ACT).bool())
    return td


NESTED = {
    name: ("agents", name)
    for name in ("action_value", "action", "reward", "done", "terminated", "action_mask")
}


class TestDQNContract(LossContract):
    loss_terms = {"loss"}

    def make_loss(self, nested):
        return DQNLoss(make_net(nested), double_dqn=True)

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


# ------------------------------------------------------------------ plain reference
def plain_dqn_loss(q_net, target_net, batch, gamma, double):
    """Textbook (double) DQN on index actions; squared error (TorchRL's "l2")."""
    obs, action = batch["observation"], batch["action"].long()
    q = q_net(obs).gather(-1, action.unsqueeze(-1))
    with torch.no_grad():
        next_q = target_net(batch["next", "observation"])
        chooser = q_net(batch["next", "observation"]) if double else next_q
        next_v = next_q.gather(-1, chooser.argmax(-1, keepdim=True))
        not_term = 1.0 - batch["next", "terminated"].float()
        y = batch["next", "reward"] + gamma * not_term * next_v
    return (q - y).pow(2).mean(), (q - y).pow(2)  # TorchRL: squared, [B, 1]


@pytest.mark.parametrize("generic", [False, True])
@pytest.mark.parametrize("double", [False, True])
def test_matches_plain_dqn(double, generic):
    torch.manual_seed(0)
    net = make_net()
    if generic:
        net = GenericModule.wrap(net)
    loss = DQNLoss(net, double_dqn=double, action_space="categorical")
    loss.make_value_estimator(gamma=0.9)
    with torch.no_grad():  # a target that differs from the live network
        loss.value_network_target_params.apply_(lambda t: t.add_(0.3 * torch.randn_like(t)))
    target_net = make_net().module
    loss.value_network_target_params["module"].to_module(target_net)
    batch = make_batch(one_hot=False)
    out = loss(batch)
    ref, ref_err = plain_dqn_loss(net.module, target_net, batch, 0.9, double)
    torch.testing.assert_close(out["loss"], ref)
    assert list(out.keys()) == ["loss"]  # TorchRL's output; the TD error goes to the batch
    torch.testing.assert_close(batch["td_error"], ref_err.detach())
    grads = torch.autograd.grad(out["loss"], list(net.parameters()))
    ref_grads = torch.autograd.grad(ref, list(net.parameters()))
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r)


def test_one_hot_and_index_actions_give_the_same_loss():
    torch.manual_seed(0)
    batch = make_batch(one_hot=True)
    index_batch = batch.clone()
    index_batch["action"] = batch["action"].long().argmax(-1)
    loss = DQNLoss(make_net())
    assert loss.action_space is None  # inferred from the data
    torch.testing.assert_close(loss(batch)["loss"], loss(index_batch)["loss"])
    cat = DQNLoss(loss.value_network, action_space=Categorical(ACT))
    assert cat.action_space == "categorical"
    torch.testing.assert_close(cat(index_batch)["loss"], loss(batch)["loss"])


def test_action_space_from_qvalue_actor_and_spec_errors():
    actor = QValueActor(nn.Linear(OBS, ACT), spec=OneHot(ACT))
    assert DQNLoss(actor).action_space == "one_hot"
    with pytest.raises(ValueError, match="unknown action_space"):
        DQNLoss(actor, action_space="discrete")
    with pytest.raises(ValueError, match="unknown loss_function"):
        DQNLoss(actor, loss_function="l3")


def test_masked_next_actions_are_never_the_argmax():
    net = TensorDictModule(nn.Identity(), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="categorical", delay_value=False)
    loss.make_value_estimator(gamma=1.0)
    batch = make_batch(batch=(2,), one_hot=False)
    batch["observation"] = torch.zeros(2, ACT)
    batch["action"] = torch.zeros(2, dtype=torch.long)
    batch["next", "observation"] = torch.tensor([[1.0, 5.0, 2.0], [3.0, 9.0, 7.0]])
    batch["next", "reward"] = torch.zeros(2, 1)
    batch["next", "terminated"] = torch.zeros(2, 1, dtype=torch.bool)
    # Q(s, a) = 0, so the TD error is the squared target (TorchRL's priority).
    loss(batch)
    assert batch["td_error"].tolist() == [[25.0], [81.0]]  # without a mask
    batch["next", "action_mask"] = torch.tensor([[True, False, True], [True, False, True]])
    loss(batch)
    assert batch["td_error"].tolist() == [[4.0], [49.0]]  # the best allowed actions


def test_truncated_bootstraps_terminated_does_not():
    net = TensorDictModule(nn.Identity(), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="categorical", delay_value=False)
    loss.make_value_estimator(gamma=0.5)
    batch = TensorDict(
        {
            "observation": torch.zeros(2, 2),
            "action": torch.zeros(2, dtype=torch.long),
            "next": {
                "observation": torch.full((2, 2), 4.0),
                "reward": torch.ones(2, 1),
                "done": torch.ones(2, 1, dtype=torch.bool),
                "terminated": torch.tensor([[True], [False]]),
            },
        },
        [2],
    )
    loss(batch)
    assert batch["td_error"].tolist() == [[1.0], [9.0]]  # squared: 1, (1 + 0.5 * 4) ** 2


def test_batch_dims_and_td_error_shape():
    # TorchRL: the squared error keeps the value's trailing dim (and the agents' dim).
    loss = DQNLoss(make_net())
    batch = make_batch(batch=(2, 3))
    loss(batch)
    assert batch["td_error"].shape == (2, 3, 1)
    nested = DQNLoss(make_net(nested=True)).set_keys(**NESTED)
    batch = make_batch(nested=True, batch=(5,))
    nested(batch)
    assert batch["td_error"].shape == (5, 2, 1)


def test_td_lambda_estimator_on_trajectories():
    torch.manual_seed(0)
    net = TensorDictModule(nn.Linear(OBS, ACT), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="one_hot").make_value_estimator("TDLambda", gamma=0.9)
    batch = make_batch(batch=(2, 5))
    loss(batch)
    with torch.no_grad():
        av = net.module(batch["observation"])
        pred = av.gather(-1, batch["action"].long().argmax(-1, keepdim=True))
        next_v = net.module(batch["next", "observation"]).max(-1, keepdim=True).values
        nxt = batch["next"]
        target = functional.td_lambda_return_estimate(
            0.9, 0.95, next_v, nxt["reward"], nxt["done"], nxt["terminated"]
        )
    torch.testing.assert_close(batch["td_error"], (pred - target).pow(2))


def test_target_updaters_and_no_target():
    loss = DQNLoss(make_net())
    soft = SoftUpdate(loss, tau=0.5)
    with torch.no_grad():
        loss.value_network.module[0].weight.add_(1.0)
    live = loss.value_network.module[0].weight
    target = loss.value_network_target_params["module", "0", "weight"]
    before = target.clone()
    soft.step()
    torch.testing.assert_close(target, (before + live) / 2)
    HardUpdate(loss, value_network_update_interval=1).step()
    assert torch.equal(target, live)
    with pytest.raises(ValueError, match="no target network"):
        SoftUpdate(DQNLoss(make_net(), delay_value=False))


def test_missing_key_error_lists_the_keys():
    batch = make_batch()
    del batch["next", "reward"]
    with pytest.raises(KeyError, match=r"missing key 'reward'.*got keys"):
        DQNLoss(make_net())(batch)


def test_smoke_cartpole_bellman_residual_shrinks():
    """Fitted Q-iteration on random CartPole transitions: the Bellman residual halves."""
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(16,))
    env.set_seed(0)
    data = env.rollout(64, break_when_any_done=False).reshape(-1)
    net = TensorDictModule(MLP(OBS, 2, num_cells=32), ["observation"], ["action_value"])
    loss = DQNLoss(net).make_value_estimator(gamma=0.8)
    live = DQNLoss(net, delay_value=False).make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(net.parameters(), lr=1e-2)
    updater = HardUpdate(loss, value_network_update_interval=20)
    fixed = data[:512]
    start = live(fixed)["loss"].item()
    for _ in range(200):
        batch = data[torch.randint(data.shape[0], (128,))]
        optim.zero_grad()
        loss(batch)["loss"].backward()
        optim.step()
        updater.step()
    assert live(fixed)["loss"].item() < 0.5 * start
