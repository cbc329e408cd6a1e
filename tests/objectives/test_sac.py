"""SACLoss: contract, numerics against a plain implementation, temperature, smoke test."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

from tdrl.envs import PendulumV1Env
from tdrl.modules import TanhNormal
from tdrl.objectives import SACLoss, SoftUpdate
from tdrl.specs import Bounded
from tdrl.testing import LossContract, agents_keys, bind_stacked, perturb_
from tdrl.testing import make_qvalue_critic as make_critic
from tdrl.testing import make_tanh_normal_actor as make_actor
from tdrl.testing import make_transition_batch as make_batch

ACT = 2
NESTED = agents_keys("action", "state_action_value", "reward", "done", "terminated")


def _written_error(loss, batch):
    """The TD error the loss writes into its input (TorchRL's output does not hold it)."""
    loss(batch)
    return batch["td_error"]


class TestSACContract(LossContract):
    loss_terms = {"loss_actor", "loss_qvalue", "loss_alpha"}

    def make_loss(self, nested):
        return SACLoss(make_actor(nested), make_critic(nested), num_qvalue_nets=3)

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def plain_sac(actor, critics, target_critics, log_alpha, batch, gamma, target_entropy):
    """Textbook SAC losses on one batch (next actions drawn before the policy's actions)."""
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_action, next_lp = TanhNormal(*actor(nxt["observation"])).rsample_and_log_prob()
        sa = torch.cat([nxt["observation"], next_action], -1)
        next_q = torch.min(target_critics[0](sa), target_critics[1](sa))
        soft = next_q - alpha * next_lp.unsqueeze(-1)
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * soft
    sa = torch.cat([obs, action], -1)
    q_loss = sum((c(sa) - y).pow(2).mean() for c in critics)
    new_action, lp = TanhNormal(*actor(obs)).rsample_and_log_prob()
    sa = torch.cat([obs, new_action], -1)
    frozen = [{k: v.detach() for k, v in c.named_parameters()} for c in critics]
    q_pi = torch.min(*(functional_call(c, p, (sa,)) for c, p in zip(critics, frozen)))
    actor_loss = (alpha * lp.unsqueeze(-1) - q_pi).mean()
    alpha_loss = -(log_alpha * (lp + target_entropy).detach()).mean()
    return actor_loss, q_loss, alpha_loss


def test_matches_plain_sac():
    torch.manual_seed(0)
    actor, critics = make_actor(), [make_critic(), make_critic()]
    loss = SACLoss(actor, critics, alpha_init=0.3, loss_function="l2").make_value_estimator(
        gamma=0.9
    )
    perturb_(loss.qvalue_network_target_params, 0.2)
    target_params = loss.qvalue_network_target_params["params", "module"]
    target_critics = bind_stacked(target_params, [make_critic().module for _ in range(2)])
    batch = make_batch()
    torch.manual_seed(1)
    out = loss(batch)
    torch.manual_seed(1)
    modules = [c.module for c in critics]
    refs = plain_sac(actor[0].module, modules, target_critics, loss.log_alpha, batch, 0.9, -ACT)
    for name, ref in zip(("loss_actor", "loss_qvalue", "loss_alpha"), refs):
        torch.testing.assert_close(out[name], ref)
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
    params = [*actor.parameters(), loss.log_alpha]
    got = torch.autograd.grad(total, params, retain_graph=True)
    want = torch.autograd.grad(sum(refs), params, retain_graph=True)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r)
    (stacked,) = torch.autograd.grad(total, [loss.qvalue_network.params["module", "0", "weight"]])
    ref = torch.autograd.grad(refs[1], [m[0].weight for m in modules])
    torch.testing.assert_close(stacked, torch.stack(ref))
    assert out["alpha"].item() == pytest.approx(0.3)


def test_temperature_options():
    actor, critic = make_actor(), make_critic()
    fixed = SACLoss(actor, critic, fixed_alpha=True, alpha_init=0.2)
    assert "log_alpha" not in dict(fixed.named_parameters())
    assert fixed(make_batch())["loss_alpha"] == 0
    bounded = SACLoss(actor, critic, min_alpha=0.5, max_alpha=2.0, alpha_init=1.0)
    with torch.no_grad():
        bounded.log_alpha.fill_(5.0)
    assert bounded(make_batch())["alpha"].item() == pytest.approx(2.0)
    spec = Bounded(-1.0, 1.0, shape=(4, 5))
    assert SACLoss(actor, critic, action_spec=spec).target_entropy == -5.0
    assert SACLoss(actor, critic, target_entropy=-0.5).target_entropy == -0.5
    with pytest.raises(ValueError, match="target_entropy must be a float or 'auto'"):
        SACLoss(actor, critic, target_entropy="max")
    with pytest.raises(ValueError, match="must be positive"):
        SACLoss(actor, critic, alpha_init=0.0)
    with pytest.raises(TypeError, match="no get_dist"):
        SACLoss(critic, critic)


def test_alpha_grows_when_the_entropy_is_below_target():
    loss = SACLoss(make_actor(), make_critic(), target_entropy=100.0)
    loss(make_batch())["loss_alpha"].backward()
    assert loss.log_alpha.grad < 0  # gradient descent raises log_alpha


def test_shapes_and_nested():
    loss = SACLoss(make_actor(), make_critic())
    assert _written_error(loss, make_batch(batch=(2, 3))).shape == (2, 3)
    nested = SACLoss(make_actor(True), make_critic(True)).set_keys(**NESTED)
    assert _written_error(nested, make_batch(True, batch=(4,))).shape == (4,)
    SoftUpdate(nested, tau=0.1).step()


def test_smoke_pendulum_critics_fit():
    """Random Pendulum transitions: the soft Bellman residual on a fixed batch halves."""
    torch.manual_seed(0)
    env = PendulumV1Env(batch_size=(8,))
    env.set_seed(0)
    data = env.rollout(64, break_when_any_done=False).reshape(-1)
    actor, critic = make_actor(obs=3, act=1), make_critic(obs=3, act=1)
    loss = SACLoss(actor, critic, action_spec=env.action_spec, alpha_init=0.1)
    loss.make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-3)
    updater = SoftUpdate(loss, tau=0.05)
    fixed = data[:256]

    def residual():
        torch.manual_seed(0)
        return _written_error(loss, fixed.clone()).pow(2).mean().item()

    start = residual()
    for _ in range(150):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        optim.step()
        updater.step()
    assert residual() < 0.5 * start
    assert math.isfinite(out["alpha"].item())


def test_auto_target_entropy_from_the_actor_spec():
    # TorchRL: without action_spec, "auto" reads the actor's spec at construction.
    from tensordict.nn import TensorDictModule
    from torch import nn

    from tdrl.modules import NormalParamExtractor, ProbabilisticActor, TanhNormal
    from tdrl.specs import Bounded

    net = TensorDictModule(
        nn.Sequential(nn.Linear(3, 6), NormalParamExtractor()), ["observation"], ["loc", "scale"]
    )
    actor = ProbabilisticActor(
        net, ["loc", "scale"], distribution_class=TanhNormal, spec=Bounded(-1.0, 1.0, shape=(3,))
    )
    loss = SACLoss(actor, make_critic(act=3))
    assert loss.target_entropy == -3.0
    assert SACLoss(make_actor(), make_critic()).target_entropy is None  # read from the data
