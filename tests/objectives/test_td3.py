"""TD3Loss: contract, numerics against a plain implementation, bounds, smoke tests."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import PendulumV1Env
from tdrl.modules import MLP
from tdrl.objectives import SoftUpdate, TD3Loss
from tdrl.specs import Bounded
from tdrl.testing import GenericModule, LossContract, agents_keys, bind_stacked, perturb_
from tdrl.testing import make_deterministic_actor as make_actor
from tdrl.testing import make_qvalue_critic as make_critic
from tdrl.testing import make_transition_batch as make_batch

ACT = 2
NESTED = agents_keys("action", "state_action_value", "reward", "done", "terminated")


def _written_error(loss, batch):
    """The TD error the loss writes into its input (TorchRL's output does not hold it)."""
    loss(batch)
    return batch["td_error"]


class TestTD3Contract(LossContract):
    loss_terms = {"loss_actor", "loss_qvalue"}

    def make_loss(self, nested):
        return TD3Loss(make_actor(nested), make_critic(nested), bounds=(-1.0, 1.0))

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def plain_td3(actor, critics, target_actor, target_critics, batch, gamma, noise, clip, bound):
    """Textbook TD3: clipped double-Q target with smoothed target actions; MSE (TorchRL's "l2")."""
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]
    with torch.no_grad():
        next_obs = nxt["observation"]
        next_action = target_actor(next_obs)
        eps = (torch.randn_like(next_action) * noise).clamp(-clip, clip)
        next_action = (next_action + eps).clamp(-bound, bound)
        sa = torch.cat([next_obs, next_action], -1)
        next_q = torch.min(target_critics[0](sa), target_critics[1](sa))
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * next_q
    sa = torch.cat([obs, action], -1)
    critic_loss = sum((c(sa) - y).pow(2).mean() for c in critics)
    actor_loss = -critics[0](torch.cat([obs, actor(obs)], -1)).mean()
    return actor_loss, critic_loss


@pytest.mark.parametrize("generic", [False, True])
def test_matches_plain_td3(generic):
    torch.manual_seed(0)
    actor, critics = make_actor(), [make_critic(), make_critic()]
    if generic:
        actor, critics = GenericModule.wrap(actor), [GenericModule.wrap(c) for c in critics]
    loss = TD3Loss(
        actor, critics, bounds=(-0.5, 0.5), policy_noise=0.3, noise_clip=0.4, loss_function="l2"
    )
    loss.make_value_estimator(gamma=0.9)
    perturb_(loss.actor_network_target_params)
    perturb_(loss.qvalue_network_target_params)
    target_actor = make_actor().module
    loss.actor_network_target_params["module"].to_module(target_actor)
    target_params = loss.qvalue_network_target_params["params", "module"]
    target_critics = bind_stacked(target_params, [make_critic().module for _ in range(2)])
    batch = make_batch()
    torch.manual_seed(1)
    out = loss(batch)
    torch.manual_seed(1)
    modules = [c.module for c in critics]
    ref_actor, ref_critic = plain_td3(
        actor.module, modules, target_actor, target_critics, batch, 0.9, 0.3, 0.4, 0.5
    )
    torch.testing.assert_close(out["loss_actor"], ref_actor)
    torch.testing.assert_close(out["loss_qvalue"], ref_critic)
    total = out["loss_actor"] + out["loss_qvalue"]
    grads = torch.autograd.grad(total, list(actor.parameters()), retain_graph=True)
    ref = torch.autograd.grad(ref_actor, list(actor.parameters()), retain_graph=True)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)
    (stacked,) = torch.autograd.grad(total, [loss.qvalue_network.params["module", "0", "weight"]])
    ref = torch.autograd.grad(ref_critic, [m[0].weight for m in modules])
    torch.testing.assert_close(stacked, torch.stack(ref))


def test_diagnostics_per_sample_as_torchrl():
    # TorchRL 0.14.1: pred_value and state_action_value_actor have one row per critic,
    # target_value and next_state_value one value per sample; td_error goes to the batch.
    torch.manual_seed(0)
    actor, critics = make_actor(), [make_critic(), make_critic()]
    loss = TD3Loss(actor, critics, bounds=(-1.0, 1.0), policy_noise=0.0)
    loss.make_value_estimator(gamma=0.9)
    batch = make_batch(batch=(6,))
    out = loss(batch)
    assert "td_error" not in out.keys() and batch["td_error"].shape == (6,)
    with torch.no_grad():
        obs, nxt = batch["observation"], batch["next"]
        modules = [c.module for c in critics]
        pred = torch.stack([m(torch.cat([obs, batch["action"]], -1)) for m in modules])
        acted = torch.cat([obs, actor.module(obs)], -1)
        on_policy = torch.stack([m(acted) for m in modules])
        next_sa = torch.cat([nxt["observation"], actor.module(nxt["observation"])], -1)
        next_q = torch.stack([m(next_sa) for m in modules]).amin(0)
        y = nxt["reward"] + 0.9 * (~nxt["terminated"]).float() * next_q
    torch.testing.assert_close(out["pred_value"], pred.squeeze(-1))
    torch.testing.assert_close(out["state_action_value_actor"], on_policy.squeeze(-1))
    torch.testing.assert_close(out["next_state_value"], next_q.squeeze(-1))
    torch.testing.assert_close(out["target_value"], y.squeeze(-1))


def test_action_spec_bounds_and_shapes():
    spec = Bounded(-0.25, 0.25, shape=(8, ACT))  # env batch dims are dropped
    loss = TD3Loss(make_actor(), make_critic(), action_spec=spec, num_qvalue_nets=3)
    assert loss.action_low.shape == (ACT,) and float(loss.action_high[0]) == 0.25
    assert loss.qvalue_network.num_copies == 3
    assert _written_error(loss, make_batch(batch=(2, 3))).shape == (2, 3)
    with pytest.raises(ValueError, match="no Bounded leaf"):
        TD3Loss(make_actor(), make_critic(), action_spec=torch.zeros(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be >= 0"):
        TD3Loss(make_actor(), make_critic(), policy_noise=-1.0)
    nested = TD3Loss(make_actor(True), make_critic(True)).set_keys(**NESTED)
    assert _written_error(nested, make_batch(True, batch=(4,))).shape == (4,)


def test_soft_update_moves_actor_and_critic_targets():
    loss = TD3Loss(make_actor(), make_critic())
    assert list(loss._targets) == ["actor_network", "qvalue_network"]
    with torch.no_grad():
        loss.qvalue_network.params.apply_(lambda t: t.add_(1.0))
        loss.actor_network.module[0].weight.add_(1.0)
    SoftUpdate(loss, tau=1.0).step()
    live = loss.qvalue_network.params["module", "0", "weight"]
    assert torch.equal(loss.qvalue_network_target_params["params", "module", "0", "weight"], live)
    target_actor = loss.actor_network_target_params["module", "0", "weight"]
    assert torch.equal(target_actor, loss.actor_network.module[0].weight)


def test_smoke_pendulum_critics_fit():
    """Random Pendulum transitions: the critics' Bellman residual on a fixed batch halves."""
    torch.manual_seed(0)
    env = PendulumV1Env(batch_size=(8,))
    env.set_seed(0)
    data = env.rollout(64, break_when_any_done=False).reshape(-1)
    actor = TensorDictModule(
        nn.Sequential(MLP(3, 1, num_cells=32), nn.Tanh()), ["observation"], ["action"]
    )
    critic = TensorDictModule(
        MLP(4, 1, num_cells=32), ["observation", "action"], ["state_action_value"]
    )
    loss = TD3Loss(actor, critic, action_spec=env.action_spec).make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-3)
    updater = SoftUpdate(loss, tau=0.05)
    fixed = data[:256]
    live = TD3Loss(actor, critic, delay_actor=False, delay_qvalue=False, policy_noise=0.0)
    live.make_value_estimator(gamma=0.8)
    live.qvalue_network = loss.qvalue_network
    start = live(fixed)["loss_qvalue"].item()
    for step in range(150):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        # TD3's delayed policy update: the actor learns every second step.
        (out["loss_qvalue"] + (out["loss_actor"] if step % 2 else 0.0)).backward()
        optim.step()
        updater.step()
    assert live(fixed)["loss_qvalue"].item() < 0.5 * start
