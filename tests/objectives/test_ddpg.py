"""DDPGLoss: contract, numerics against a plain implementation, targets, smoke test."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import PendulumV1Env
from tdrl.modules import MLP
from tdrl.objectives import DDPGLoss, SoftUpdate
from tdrl.testing import GenericModule, LossContract, agents_keys, perturb_
from tdrl.testing import make_deterministic_actor as make_actor
from tdrl.testing import make_qvalue_critic as make_critic
from tdrl.testing import make_transition_batch as make_batch

OBS, ACT = 3, 2
NESTED = agents_keys("state_action_value", "reward", "done", "terminated")


class TestDDPGContract(LossContract):
    loss_terms = {"loss_actor", "loss_value"}

    def make_loss(self, nested):
        return DDPGLoss(make_actor(nested), make_critic(nested), delay_actor=True)

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def plain_ddpg(actor, critic, target_actor, target_critic, batch, gamma):
    """Textbook DDPG losses: returns (actor loss, critic loss) and their separate gradients."""
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]
    q = critic(torch.cat([obs, action], -1))
    with torch.no_grad():
        next_obs = nxt["observation"]
        next_q = target_critic(torch.cat([next_obs, target_actor(next_obs)], -1))
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * next_q
    critic_loss = (q - y).pow(2).mean()  # TorchRL's "l2": no 0.5
    actor_loss = -critic(torch.cat([obs, actor(obs)], -1)).mean()
    return actor_loss, critic_loss


@pytest.mark.parametrize("generic", [False, True])
def test_matches_plain_ddpg(generic):
    torch.manual_seed(0)
    actor, critic = make_actor(), make_critic()
    if generic:
        actor, critic = GenericModule.wrap(actor), GenericModule.wrap(critic)
    loss = DDPGLoss(actor, critic, delay_actor=True).make_value_estimator(gamma=0.9)
    perturb_(loss.actor_network_target_params)
    perturb_(loss.value_network_target_params)
    target_actor, target_critic = make_actor().module, make_critic().module
    loss.actor_network_target_params["module"].to_module(target_actor)
    loss.value_network_target_params["module"].to_module(target_critic)
    batch = make_batch()
    out = loss(batch)
    ref_actor, ref_critic = plain_ddpg(
        actor.module, critic.module, target_actor, target_critic, batch, 0.9
    )
    torch.testing.assert_close(out["loss_actor"], ref_actor)
    torch.testing.assert_close(out["loss_value"], ref_critic)
    # The actor loss trains the actor only, the critic loss the critic only.
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    g_actor = torch.autograd.grad(
        out["loss_actor"] + out["loss_value"], actor_params, retain_graph=True
    )
    for g, r in zip(g_actor, torch.autograd.grad(ref_actor, actor_params, retain_graph=True)):
        torch.testing.assert_close(g, r)
    g_critic = torch.autograd.grad(out["loss_actor"] + out["loss_value"], critic_params)
    for g, r in zip(g_critic, torch.autograd.grad(ref_critic, critic_params)):
        torch.testing.assert_close(g, r)


def test_diagnostics_per_sample_as_torchrl():
    # TorchRL 0.14.1: pred_value / target_value are per sample ([B], the critic's trailing
    # dim dropped); the output keeps td_error (as the batch does) and the maxima.
    torch.manual_seed(0)
    actor, critic = make_actor(), make_critic()
    loss = DDPGLoss(actor, critic).make_value_estimator(gamma=0.9)
    batch = make_batch(batch=(6,))
    out = loss(batch)
    with torch.no_grad():
        obs, nxt = batch["observation"], batch["next"]
        q = critic.module(torch.cat([obs, batch["action"]], -1)).squeeze(-1)
        next_obs = nxt["observation"]
        next_q = critic.module(torch.cat([next_obs, actor.module(next_obs)], -1)).squeeze(-1)
        y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"]).float().squeeze(-1) * next_q
    torch.testing.assert_close(out["pred_value"], q)
    torch.testing.assert_close(out["target_value"], y)
    torch.testing.assert_close(out["pred_value_max"], q.max())
    torch.testing.assert_close(out["td_error"], batch["td_error"])
    torch.testing.assert_close(batch["td_error"], (q - y) ** 2)


def test_shapes_and_target_updates():
    loss = DDPGLoss(make_actor(), make_critic())
    assert loss(make_batch(batch=(2, 3)))["td_error"].shape == (2, 3)
    assert [k for k in loss._targets] == ["value_network"]
    with torch.no_grad():
        loss.value_network.module[0].weight.add_(1.0)
    SoftUpdate(loss, tau=1.0).step()
    assert torch.equal(
        loss.value_network_target_params["module", "0", "weight"],
        loss.value_network.module[0].weight,
    )
    nested = DDPGLoss(make_actor(True), make_critic(True)).set_keys(**NESTED)
    assert nested(make_batch(True, batch=(4,)))["td_error"].shape == (4,)


def test_smoke_pendulum_critic_fits():
    """Random Pendulum transitions: the Bellman residual on a fixed batch halves."""
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
    loss = DDPGLoss(actor, critic).make_value_estimator(gamma=0.8)
    live = DDPGLoss(actor, critic, delay_value=False).make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-3)
    updater = SoftUpdate(loss, tau=0.05)
    fixed = data[:256]
    start = live(fixed)["loss_value"].item()
    for _ in range(150):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        (out["loss_actor"] + out["loss_value"]).backward()
        optim.step()
        updater.step()
    assert live(fixed)["loss_value"].item() < 0.5 * start


def bandit_batch(n):
    """One-step episodes whose reward peaks at ``action = 0.5 * observation[:2]``."""
    obs = torch.randn(n, OBS)
    action = torch.rand(n, ACT) * 2 - 1
    reward = -(action - 0.5 * obs[:, :ACT]).pow(2).sum(-1, keepdim=True)
    ones = torch.ones(n, 1, dtype=torch.bool)
    nxt = {"observation": obs, "reward": reward, "done": ones, "terminated": ones}
    return TensorDict({"observation": obs, "action": action, "next": nxt}, [n])


def test_smoke_bandit_actor_finds_the_best_action():
    torch.manual_seed(0)
    actor = make_actor()
    critic = TensorDictModule(
        MLP(OBS + ACT, 1, num_cells=64, activation=nn.ReLU),
        ["observation", "action"],
        ["state_action_value"],
    )
    loss = DDPGLoss(actor, critic)
    optim = torch.optim.Adam(
        [{"params": actor.parameters(), "lr": 1e-3}, {"params": critic.parameters(), "lr": 3e-3}]
    )
    test = bandit_batch(256)
    best = 0.5 * test["observation"][:, :ACT]
    start = (actor(test.copy())["action"] - best).pow(2).mean().item()
    for _ in range(200):
        out = loss(bandit_batch(128))
        optim.zero_grad()
        (out["loss_actor"] + out["loss_value"]).backward()
        optim.step()
    assert (actor(test.copy())["action"] - best).pow(2).mean().item() < 0.5 * start
