"""CQLLoss and DiscreteCQLLoss: contract, numerics against plain code, lagrange, smoke tests."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torch.func import functional_call

from tdrl.envs import CartPoleEnv, PendulumV1Env
from tdrl.modules import MLP, TanhNormal
from tdrl.objectives import CQLLoss, DiscreteCQLLoss, HardUpdate, SoftUpdate
from tdrl.specs import Bounded
from tdrl.testing import LossContract, agents_keys, bind_stacked, make_transition_batch, perturb_
from tdrl.testing import make_action_value_net as make_qnet
from tdrl.testing import make_qvalue_critic as make_critic
from tdrl.testing import make_tanh_normal_actor as make_actor

ACT, B = 2, 6
NESTED = agents_keys("action", "state_action_value", "reward", "done", "terminated")


def make_batch(nested=False, batch=(B,), discrete=False):
    return make_transition_batch(nested, batch, action="index" if discrete else "continuous")


class TestCQLContract(LossContract):
    loss_terms = {"loss_actor", "loss_qvalue", "loss_cql", "loss_alpha", "loss_alpha_prime"}

    def make_loss(self, nested):
        return CQLLoss(make_actor(nested), make_critic(nested), with_lagrange=True, num_random=3)

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


class TestDiscreteCQLContract(LossContract):
    loss_terms = {"loss_qvalue", "loss_cql"}

    def make_loss(self, nested):
        return DiscreteCQLLoss(make_qnet(nested), action_space="categorical")

    def make_batch(self, nested):
        return make_batch(nested, discrete=True)

    def nested_keys(self):
        return agents_keys("action", "action_value", "reward", "done", "terminated")

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def plain_cql(actor, critics, targets, log_alpha, batch, gamma, n, temp, weight, bound):
    """CQL(H) with SAC, deterministic backup, written with a loop over the critics."""
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        uniform = -bound + 2 * bound * torch.rand(n, *action.shape)
        cur, cur_lp = TanhNormal(*actor(obs), low=-bound, high=bound).rsample_and_log_prob((n,))
        nxt_dist = TanhNormal(*actor(nxt["observation"]), low=-bound, high=bound)
        fol, fol_lp = nxt_dist.rsample_and_log_prob((n,))
        next_action, _ = nxt_dist.rsample_and_log_prob()
        sa = torch.cat([nxt["observation"], next_action], -1)
        next_q = torch.min(targets[0](sa), targets[1](sa))
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * next_q
    log_u = -ACT * math.log(2 * bound)
    q_loss, cql = 0.0, 0.0
    rep = obs.expand(n, *obs.shape)
    for c in critics:
        q_data = c(torch.cat([obs, action], -1))
        q_loss = q_loss + (q_data - y).pow(2).mean()
        scores = torch.cat(
            [
                c(torch.cat([rep, uniform], -1)) - log_u,
                c(torch.cat([rep, cur], -1)) - cur_lp.unsqueeze(-1),
                c(torch.cat([rep, fol], -1)) - fol_lp.unsqueeze(-1),
            ]
        )
        cql = cql + weight * (temp * torch.logsumexp(scores / temp, 0) - q_data).mean()
    new_action, lp = TanhNormal(*actor(obs), low=-bound, high=bound).rsample_and_log_prob()
    sa = torch.cat([obs, new_action], -1)
    frozen = [{k: v.detach() for k, v in c.named_parameters()} for c in critics]
    q_pi = torch.min(*(functional_call(c, p, (sa,)) for c, p in zip(critics, frozen)))
    actor_loss = (alpha * lp.unsqueeze(-1) - q_pi).mean()
    return actor_loss, q_loss, cql


def test_matches_plain_cql():
    torch.manual_seed(0)
    actor, critics = make_actor(), [make_critic(), make_critic()]
    spec = Bounded(-1.0, 1.0, shape=(ACT,))
    loss = CQLLoss(
        actor,
        critics,
        action_spec=spec,
        num_random=4,
        temperature=0.7,
        min_q_weight=2.0,
        loss_function="l2",
    )
    loss.make_value_estimator(gamma=0.9)
    perturb_(loss.qvalue_network_target_params, 0.2)
    target_params = loss.qvalue_network_target_params["params", "module"]
    targets = bind_stacked(target_params, [make_critic().module for _ in range(2)])
    batch = make_batch()
    torch.manual_seed(1)
    out = loss(batch)
    torch.manual_seed(1)
    modules = [c.module for c in critics]
    refs = plain_cql(
        actor[0].module, modules, targets, loss.log_alpha, batch, 0.9, 4, 0.7, 2.0, 1.0
    )
    for name, ref in zip(("loss_actor", "loss_qvalue", "loss_cql"), refs):
        torch.testing.assert_close(out[name], ref)
    total = out["loss_qvalue"] + out["loss_cql"]
    (stacked,) = torch.autograd.grad(total, [loss.qvalue_network.params["module", "0", "weight"]])
    ref = torch.autograd.grad(refs[1] + refs[2], [m[0].weight for m in modules])
    torch.testing.assert_close(stacked, torch.stack(ref))


def test_lagrange_terms_train_only_alpha_prime():
    loss = CQLLoss(make_actor(), make_critic(), with_lagrange=True, lagrange_thresh=10.0)
    out = loss(make_batch())
    out["loss_alpha_prime"].backward(retain_graph=True)
    assert loss.log_alpha_prime.grad is not None and loss.log_alpha_prime.grad > 0  # gap < thresh
    assert all(p.grad is None for p in loss.qvalue_network.parameters())
    assert "alpha_prime" not in out.keys() and loss.log_alpha_prime.exp() == 1.0  # TorchRL's keys
    no_lagrange = CQLLoss(make_actor(), make_critic())
    assert "loss_alpha_prime" not in no_lagrange(make_batch()).keys()
    with pytest.raises(ValueError, match="temperature must be > 0"):
        CQLLoss(make_actor(), make_critic(), temperature=0.0)


def test_shapes_and_nested():
    loss = CQLLoss(make_actor(), make_critic(), num_random=2)
    batch = make_batch(batch=(2, 3))
    loss(batch)
    assert batch["td_error"].shape == (2, 3)
    nested = CQLLoss(make_actor(True), make_critic(True), num_random=2).set_keys(**NESTED)
    batch = make_batch(True, batch=(4,))
    nested(batch)
    assert batch["td_error"].shape == (4,)


def test_discrete_cql_matches_plain_and_respects_masks():
    torch.manual_seed(0)
    net = make_qnet()
    loss = DiscreteCQLLoss(net, action_space="categorical", min_q_weight=0.5, delay_value=False)
    loss.make_value_estimator(gamma=0.9)
    batch = make_batch(discrete=True)
    out = loss(batch)
    q = net.module(batch["observation"])
    q_data = q.gather(-1, batch["action"].unsqueeze(-1))
    with torch.no_grad():
        next_q = net.module(batch["next", "observation"]).max(-1, keepdim=True).values
        y = batch["next", "reward"] + 0.9 * (~batch["next", "terminated"]).float() * next_q
    torch.testing.assert_close(out["loss_qvalue"], 0.5 * (q_data - y).pow(2).mean())
    cql = 0.5 * (torch.logsumexp(q, -1, keepdim=True) - q_data).mean()
    torch.testing.assert_close(out["loss_cql"], cql)
    batch["action_mask"] = torch.zeros(B, ACT, dtype=torch.bool).scatter_(
        -1, batch["action"].unsqueeze(-1), True
    )
    assert loss.cql_loss(batch)[1]["cql_gap"].abs() < 1e-6  # only the data action is allowed


def test_smoke_pendulum_cql_critics_fit():
    """Random Pendulum transitions: the Bellman residual halves under the CQL penalty."""
    torch.manual_seed(0)
    env = PendulumV1Env(batch_size=(8,))
    env.set_seed(0)
    data = env.rollout(64, break_when_any_done=False).reshape(-1)
    actor, critic = make_actor(obs=3, act=1), make_critic(obs=3, act=1)
    loss = CQLLoss(actor, critic, action_spec=env.action_spec, num_random=4, alpha_init=0.1)
    loss.make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-3)
    updater = SoftUpdate(loss, tau=0.05)
    fixed = data[:256]

    def residual():
        torch.manual_seed(0)
        batch = fixed.clone()
        loss(batch)
        return batch["td_error"].pow(2).mean().item()

    start = residual()
    for _ in range(120):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        sum(v for k, v in out.items() if k.startswith("loss_")).backward()
        optim.step()
        updater.step()
    assert residual() < 0.5 * start


def _mostly_left(td):
    index = (torch.rand(td.batch_size) < 0.1).long()
    td.set("action", nn.functional.one_hot(index, 2))
    return td


def test_smoke_cartpole_discrete_cql():
    """Offline CartPole data of a mostly-left policy: the residual halves, the rare action's
    value drops below the common one's and the CQL gap shrinks."""
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(16,))
    env.set_seed(0)
    data = env.rollout(48, _mostly_left, break_when_any_done=False).reshape(-1)
    net = TensorDictModule(MLP(4, 2, num_cells=32), ["observation"], ["action_value"])
    loss = DiscreteCQLLoss(net).make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(net.parameters(), lr=1e-2)
    updater = HardUpdate(loss, value_network_update_interval=20)
    fixed = data[:512]
    start = loss(fixed)
    start_gap = loss.cql_loss(fixed)[1]["cql_gap"]
    for _ in range(150):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        (out["loss_qvalue"] + out["loss_cql"]).backward()
        optim.step()
        updater.step()
    end = loss(fixed)
    assert end["loss_qvalue"] < 0.5 * start["loss_qvalue"]
    assert loss.cql_loss(fixed)[1]["cql_gap"] < 0.8 * start_gap
    values = net(fixed.copy())["action_value"].detach()
    assert (values[:, 0] - values[:, 1]).mean() > 0.5


def test_cql_outputs_torchrl_keys_with_the_behaviour_cloning_term():
    # TorchRL 0.14.1's CQLLoss output: the loss terms (loss_actor_bc included), alpha, entropy
    torch.manual_seed(0)
    loss = CQLLoss(make_actor(), make_critic(), action_spec=Bounded(-1.0, 1.0, shape=(ACT,)))
    batch = make_batch()
    batch["action"] = batch["action"].clamp(-0.9, 0.9)  # inside TanhNormal's support
    out = loss(batch.clone())
    assert sorted(out.keys()) == [
        "alpha",
        "entropy",
        "loss_actor",
        "loss_actor_bc",
        "loss_alpha",
        "loss_cql",
        "loss_qvalue",
    ]
    # alpha * log pi(a~|s) - log pi(a_data|s), a~ reparameterised, averaged over the batch
    torch.manual_seed(3)
    got, meta = loss.actor_bc_loss(batch.clone())
    torch.manual_seed(3)
    dist = loss.actor_network.get_dist(batch.clone())
    sample = dist.rsample()
    bc = dist.log_prob(batch["action"])
    expected = (loss._alpha() * dist.log_prob(sample) - bc).mean()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(meta["bc_log_prob"], bc.mean())
    got.backward()  # trains the actor
    assert any(p.grad is not None for p in loss.actor_network.parameters())


def test_discrete_cql_bootstraps_from_the_live_network_as_torchrl():
    # TorchRL 0.14.1's DiscreteCQLLoss reads max_a Q(s', a) of the live network even with
    # delay_value=True: its target copy only moves with the updaters.
    torch.manual_seed(0)
    net = make_qnet()
    loss = DiscreteCQLLoss(net, action_space="categorical")  # delay_value=True
    loss.make_value_estimator(gamma=0.9)
    with torch.no_grad():
        perturb_(loss.value_network_target_params, scale=1.0)
    batch = make_batch(discrete=True)
    out = loss(batch)
    q_data = net.module(batch["observation"]).gather(-1, batch["action"].unsqueeze(-1))
    with torch.no_grad():
        next_q = net.module(batch["next", "observation"]).max(-1, keepdim=True).values
        y = batch["next", "reward"] + 0.9 * (~batch["next", "terminated"]).float() * next_q
    torch.testing.assert_close(out["target_value"], y.mean())
    torch.testing.assert_close(out["loss_qvalue"], 0.5 * (q_data - y).pow(2).mean())
    torch.testing.assert_close(batch["td_error"], (q_data - y).detach().pow(2))
    with pytest.raises(ValueError, match="double_dqn"):
        DiscreteCQLLoss(make_qnet(), action_space="categorical", double_dqn=True)
