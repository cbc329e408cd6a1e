"""IQLLoss and DiscreteIQLLoss: contract, numerics against plain code, smoke tests."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import CartPoleEnv, PendulumV1Env
from tdrl.modules import TanhNormal
from tdrl.objectives import DiscreteIQLLoss, IQLLoss, SoftUpdate
from tdrl.testing import (
    LossContract,
    agents_keys,
    bind_stacked,
    make_action_value_net,
    make_categorical_actor,
    make_qvalue_critic,
    make_tanh_normal_actor,
    make_transition_batch,
    perturb_,
)
from tdrl.testing import make_state_value_net as make_value

B = 6


def make_actor(nested=False, obs=3, act=2, discrete=False):
    return (make_categorical_actor if discrete else make_tanh_normal_actor)(nested, obs, act)


def make_critic(nested=False, obs=3, act=2, discrete=False):
    if not discrete:
        return make_qvalue_critic(nested, obs, act)
    # TorchRL's discrete IQL reads the per-action values at "state_action_value".
    net = make_action_value_net(nested, obs, act)
    key = ("agents", "state_action_value") if nested else "state_action_value"
    return TensorDictModule(net.module, net.in_keys, [key])


def make_batch(nested=False, batch=(B,), discrete=False):
    # Continuous actions stay off the TanhNormal's +-1 edges, where log-probs blow up.
    action = "one_hot" if discrete else "continuous"
    return make_transition_batch(nested, batch, action=action, bound=0.9)


def _nested(discrete):
    return agents_keys(
        "action", "state_action_value", "reward", "done", "terminated", value="state_value"
    )


class TestIQLContract(LossContract):
    loss_terms = {"loss_actor", "loss_qvalue", "loss_value"}
    discrete = False
    loss_cls: type = IQLLoss

    def make_loss(self, nested):
        d = self.discrete
        return self.loss_cls(
            make_actor(nested, discrete=d),
            make_critic(nested, discrete=d),
            value_network=make_value(nested),
        )

    def make_batch(self, nested):
        return make_batch(nested, discrete=self.discrete)

    def nested_keys(self):
        return _nested(self.discrete)

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


class TestDiscreteIQLContract(TestIQLContract):
    discrete = True
    loss_cls = DiscreteIQLLoss


def plain_iql(actor, critics, targets, value_net, batch, gamma, expectile, temp, discrete):
    """IQL written with tensors and a loop over the critics."""
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]

    def q_of(net):
        if discrete:
            return net(obs).gather(-1, action.argmax(-1, keepdim=True))
        return net(torch.cat([obs, action], -1))

    with torch.no_grad():
        q_target = torch.min(*(q_of(t) for t in targets))
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * value_net(nxt["observation"])
    v = value_net(obs)
    u = q_target - v
    value_loss = ((expectile - (u < 0).float()).abs() * u.pow(2)).mean()
    q_loss = sum((q_of(c) - y).pow(2).mean() for c in critics)
    if discrete:
        log_prob = (torch.log_softmax(actor(obs), -1) * action).sum(-1)
    else:
        log_prob = TanhNormal(*actor(obs)).log_prob(action)
    weights = torch.exp(temp * (q_target - v.detach()).squeeze(-1)).clamp(max=100)
    actor_loss = -(weights * log_prob).mean()
    return actor_loss, q_loss, value_loss


@pytest.mark.parametrize("discrete", [False, True])
def test_matches_plain_iql(discrete):
    torch.manual_seed(0)
    actor = make_actor(discrete=discrete)
    critics = [make_critic(discrete=discrete) for _ in range(2)]
    value = make_value()
    cls = DiscreteIQLLoss if discrete else IQLLoss
    loss = cls(
        actor, critics, value_network=value, expectile=0.8, temperature=2.0, loss_function="l2"
    )
    loss.make_value_estimator(gamma=0.9)
    perturb_(loss.qvalue_network_target_params, 0.2)
    target_params = loss.qvalue_network_target_params["params", "module"]
    targets = bind_stacked(target_params, [make_critic(discrete=discrete).module for _ in range(2)])
    batch = make_batch(discrete=discrete)
    out = loss(batch)
    modules = [c.module for c in critics]
    refs = plain_iql(
        actor[0].module, modules, targets, value.module, batch, 0.9, 0.8, 2.0, discrete
    )
    for name, ref in zip(("loss_actor", "loss_qvalue", "loss_value"), refs):
        torch.testing.assert_close(out[name], ref)
    params = [*actor.parameters(), *value.parameters()]
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]
    got = torch.autograd.grad(total, params)
    for g, r in zip(got, torch.autograd.grad(sum(refs), params)):
        torch.testing.assert_close(g, r)


def test_shapes_and_errors():
    loss = IQLLoss(make_actor(), make_critic(), value_network=make_value())
    batch = make_batch(batch=(2, 3))
    loss(batch)
    assert batch["td_error"].shape == (2, 3)
    nested = IQLLoss(make_actor(True), make_critic(True), value_network=make_value(True))
    batch = make_batch(True, batch=(4,))
    nested.set_keys(**_nested(False))(batch)
    assert batch["td_error"].shape == (4,)
    with pytest.raises(ValueError, match=r"expectile must be in \(0, 1\)"):
        IQLLoss(make_actor(), make_critic(), value_network=make_value(), expectile=1.0)
    with pytest.raises(TypeError, match="no get_dist"):
        IQLLoss(make_critic(), make_critic(), value_network=make_value())


def test_smoke_pendulum_iql_fits():
    """Offline Pendulum transitions: the critics' Bellman loss halves."""
    torch.manual_seed(0)
    env = PendulumV1Env(batch_size=(8,))
    env.set_seed(0)
    data = env.rollout(64, break_when_any_done=False).reshape(-1)
    data["action"] = data["action"] / 2  # the TanhNormal actor lives in [-1, 1]
    actor, critic = make_actor(obs=3, act=1), make_critic(obs=3, act=1)
    loss = IQLLoss(actor, critic, value_network=make_value(obs=3))
    loss.make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-3)
    updater = SoftUpdate(loss, tau=0.05)
    fixed = data[:256]
    start = loss(fixed)
    for _ in range(120):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]).backward()
        optim.step()
        updater.step()
    end = loss(fixed)
    assert end["loss_qvalue"] < 0.5 * start["loss_qvalue"]


def _mostly_left(td):
    index = (torch.rand(td.batch_size) < 0.1).long()
    td.set("action", nn.functional.one_hot(index, 2))
    return td


def _mean_values(loss, data):
    """The critics' mean value of the data actions and the value network's mean value."""
    with torch.no_grad():
        q = loss.qvalue_network(data.copy(), out_key="state_action_value")  # [critics, B, n]
        q = (q * data["action"]).sum(-1).mean()
        v = loss.value_network(data.copy())["state_value"].mean()
    return q, v


def test_smoke_cartpole_discrete_iql_imitates_and_fits():
    """Offline data of a mostly-left policy (reward 1 per step, gamma 0.8, values up to 5):
    Q and V climb from 0 past 2.5 and the actor prefers left."""
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(16,))
    env.set_seed(0)
    data = env.rollout(48, _mostly_left, break_when_any_done=False).reshape(-1)
    data["action"] = data["action"].float()
    actor = make_actor(obs=4, act=2, discrete=True)
    loss = DiscreteIQLLoss(
        actor, make_critic(obs=4, act=2, discrete=True), value_network=make_value(obs=4)
    )
    loss.make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    updater = SoftUpdate(loss, tau=0.1)
    fixed = data[:512]
    start_q, start_v = _mean_values(loss, fixed)
    assert start_q.abs() < 1 and start_v.abs() < 1
    for _ in range(120):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]).backward()
        optim.step()
        updater.step()
    end_q, end_v = _mean_values(loss, fixed)
    assert end_q > 2.5 and end_v > 2.5
    probs = actor.get_dist(fixed.copy()).probs
    assert probs[:, 0].mean() > 0.6


def test_entropy_diagnostic_is_torchrls_mean_negative_log_prob():
    # TorchRL's IQL outputs "entropy" = mean(-log pi(a|s)) over the batch's actions.
    torch.manual_seed(0)
    actor = make_tanh_normal_actor()
    loss = IQLLoss(actor, make_qvalue_critic(), make_value())
    batch = make_transition_batch(batch=(4,), bound=0.9)
    out = loss(batch)
    with torch.no_grad():
        expected = -actor.get_dist(batch.copy()).log_prob(batch["action"]).mean()
    torch.testing.assert_close(out["entropy"], expected)
