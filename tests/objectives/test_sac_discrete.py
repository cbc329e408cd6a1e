"""DiscreteSACLoss: contract, numerics against a plain implementation, masks, smoke test."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

from tdrl.envs import CartPoleEnv
from tdrl.modules import MLP, MaskedCategorical
from tdrl.objectives import DiscreteSACLoss, SoftUpdate
from tdrl.testing import (
    LossContract,
    agents_keys,
    bind_stacked,
    make_action_value_net,
    make_categorical_actor,
    make_transition_batch,
    perturb_,
)

OBS, ACT, B = 4, 3, 6
make_actor = partial(make_categorical_actor, obs=OBS, act=ACT)
make_critic = partial(make_action_value_net, obs=OBS, act=ACT)
make_batch = partial(make_transition_batch, obs=OBS, act=ACT, action="one_hot")
NESTED = agents_keys("action", "action_value", "reward", "done", "terminated")


def _written_error(loss, batch):
    """The TD error the loss writes into its input (TorchRL's output does not hold it)."""
    loss(batch)
    return batch["td_error"]


class TestDiscreteSACContract(LossContract):
    loss_terms = {"loss_actor", "loss_qvalue", "loss_alpha"}

    def make_loss(self, nested):
        return DiscreteSACLoss(make_actor(nested), make_critic(nested), num_actions=ACT)

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def plain_discrete_sac(actor, critics, target_critics, log_alpha, batch, gamma, target_entropy):
    """Discrete SAC written out with tensors: expectations over the softmax policy."""
    obs, nxt = batch["observation"], batch["next"]
    index = batch["action"].argmax(-1, keepdim=True)
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_lp = torch.log_softmax(actor(nxt["observation"]), -1)
        next_q = torch.min(*(c(nxt["observation"]) for c in target_critics))
        soft = (next_lp.exp() * (next_q - alpha * next_lp)).sum(-1, keepdim=True)
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * soft
    qs = [c(obs) for c in critics]
    q_loss = sum((q.gather(-1, index) - y).pow(2).mean() for q in qs)
    lp = torch.log_softmax(actor(obs), -1)
    q_min = torch.min(*(q.detach() for q in qs))
    actor_loss = (lp.exp() * (alpha * lp - q_min)).sum(-1).mean()
    entropy = -(lp.exp() * lp).sum(-1)
    alpha_loss = -(log_alpha * (target_entropy - entropy).detach()).mean()
    return actor_loss, q_loss, alpha_loss


def test_matches_plain_discrete_sac():
    torch.manual_seed(0)
    actor, critics = make_actor(), [make_critic(), make_critic()]
    loss = DiscreteSACLoss(actor, critics, num_actions=ACT, alpha_init=0.5, loss_function="l2")
    loss.make_value_estimator(gamma=0.9)
    perturb_(loss.qvalue_network_target_params, 0.2)
    target_params = loss.qvalue_network_target_params["params", "module"]
    target_critics = bind_stacked(target_params, [make_critic().module for _ in range(2)])
    batch = make_batch()
    out = loss(batch)
    modules = [c.module for c in critics]
    target_entropy = 0.98 * math.log(ACT)
    refs = plain_discrete_sac(
        actor[0].module, modules, target_critics, loss.log_alpha, batch, 0.9, target_entropy
    )
    for name, ref in zip(("loss_actor", "loss_qvalue", "loss_alpha"), refs):
        torch.testing.assert_close(out[name], ref)
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
    params = [*actor.parameters(), loss.log_alpha]
    got = torch.autograd.grad(total, params, retain_graph=True)
    for g, r in zip(got, torch.autograd.grad(sum(refs), params, retain_graph=True)):
        torch.testing.assert_close(g, r)


def test_masked_actions_keep_the_losses_finite():
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(MLP(OBS, ACT, num_cells=16), ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(
            {"logits": "logits", "mask": "action_mask"},
            ["action"],
            distribution_class=MaskedCategorical,
        ),
    )
    loss = DiscreteSACLoss(actor, make_critic(), num_actions=ACT, action_space="categorical")
    batch = make_batch()
    batch["action"] = torch.zeros(B, dtype=torch.long)
    mask = torch.tensor([True, False, True]).expand(B, ACT)
    batch["action_mask"] = mask
    batch["next", "action_mask"] = mask
    out = loss(batch)
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
    total.backward()
    assert torch.isfinite(total)
    assert all(torch.isfinite(p.grad).all() for p in actor.parameters())
    assert out["entropy"] <= math.log(2) + 1e-6  # two allowed actions at most


def test_shapes_and_errors():
    loss = DiscreteSACLoss(make_actor(), make_critic(), num_actions=ACT)
    assert _written_error(loss, make_batch(batch=(2, 3))).shape == (2, 3)
    nested = DiscreteSACLoss(make_actor(True), make_critic(True), num_actions=ACT)
    assert _written_error(nested.set_keys(**NESTED), make_batch(True, batch=(4,))).shape == (4,)
    with pytest.raises(ValueError, match="num_actions must be >= 1"):
        DiscreteSACLoss(make_actor(), make_critic(), num_actions=0)
    with pytest.raises(ValueError, match="float or 'auto'"):
        DiscreteSACLoss(make_actor(), make_critic(), num_actions=2, target_entropy="x")


def test_smoke_cartpole_critics_fit():
    """Random CartPole transitions: the soft Bellman residual on a fixed batch halves."""
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(16,))
    env.set_seed(0)
    data = env.rollout(48, break_when_any_done=False).reshape(-1)
    actor, critic = make_actor(act=2), make_critic(act=2)
    loss = DiscreteSACLoss(actor, critic, num_actions=2, alpha_init=0.05)
    loss.make_value_estimator(gamma=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    updater = SoftUpdate(loss, tau=0.1)
    fixed = data[:256]
    start = _written_error(loss, fixed.clone()).pow(2).mean().item()
    for _ in range(100):
        out = loss(data[torch.randint(data.shape[0], (128,))])
        optim.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        optim.step()
        updater.step()
    assert _written_error(loss, fixed.clone()).pow(2).mean().item() < 0.5 * start
