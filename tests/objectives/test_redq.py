"""REDQLoss: contract, numerics against a plain loop over critics, subsets, smoke test."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from tdrl.envs import PendulumV1Env
from tdrl.modules import TanhNormal
from tdrl.objectives import REDQLoss, SoftUpdate
from tdrl.testing import LossContract, agents_keys, bind_stacked, perturb_
from tdrl.testing import make_qvalue_critic as make_critic
from tdrl.testing import make_tanh_normal_actor as make_actor
from tdrl.testing import make_transition_batch as make_batch

N = 5
NESTED = agents_keys("action", "state_action_value", "reward", "done", "terminated")


class TestREDQContract(LossContract):
    loss_terms = {"loss_actor", "loss_qvalue", "loss_alpha"}

    def make_loss(self, nested):
        return REDQLoss(make_actor(nested), make_critic(nested), num_qvalue_nets=N)

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def plain_redq(actor, critics, target_critics, log_alpha, batch, gamma, m, target_entropy=-2.0):
    """REDQ with a Python loop over the critics, in TorchRL 0.14.1's order of random draws
    (the sorted subset, then one draw of the actions at s and s'): subset-min target,
    ensemble-mean actor, TorchRL's temperature loss -alpha * (log pi + target entropy) over
    both draws."""
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]
    alpha = log_alpha.detach().exp()
    subset = torch.randperm(len(critics))[:m].sort().values.tolist()
    both = torch.stack([obs, nxt["observation"]])
    actions, lps = TanhNormal(*actor(both)).rsample_and_log_prob()
    with torch.no_grad():
        sa = torch.cat([nxt["observation"], actions[1]], -1)
        next_q = torch.stack([target_critics[i](sa) for i in subset])
        soft = (next_q - alpha * lps[1].unsqueeze(-1)).amin(0)
        y = nxt["reward"] + gamma * (~nxt["terminated"]).float() * soft
    sa = torch.cat([obs, action], -1)
    q_loss = sum((c(sa) - y).pow(2).mean() for c in critics) / len(critics)  # TorchRL: mean
    sa = torch.cat([obs, actions[0]], -1)
    frozen = [{k: v.detach() for k, v in c.named_parameters()} for c in critics]
    q_pi = torch.stack([functional_call(c, p, (sa,)) for c, p in zip(critics, frozen)])
    actor_loss = (alpha * lps[0].unsqueeze(-1) - q_pi).mean()
    alpha_loss = (-log_alpha.exp() * (lps.detach() + target_entropy)).mean()
    return actor_loss, q_loss, alpha_loss


def test_matches_plain_redq():
    torch.manual_seed(0)
    actor, critics = make_actor(), [make_critic() for _ in range(N)]
    loss = REDQLoss(
        actor, critics, num_qvalue_nets=N, sub_sample_len=2, alpha_init=0.2, loss_function="l2"
    )
    loss.make_value_estimator(gamma=0.9)
    perturb_(loss.qvalue_network_target_params, 0.5)
    target_params = loss.qvalue_network_target_params["params", "module"]
    targets = bind_stacked(target_params, [make_critic().module for _ in range(N)])
    batch = make_batch()
    modules = [c.module for c in critics]
    for seed in range(3):  # several random subsets
        torch.manual_seed(seed)
        out = loss(batch)
        torch.manual_seed(seed)
        ref_actor, ref_q, ref_alpha = plain_redq(
            actor[0].module, modules, targets, loss.log_alpha, batch, 0.9, 2
        )
        torch.testing.assert_close(out["loss_actor"], ref_actor)
        torch.testing.assert_close(out["loss_qvalue"], ref_q)
        torch.testing.assert_close(out["loss_alpha"], ref_alpha)


def test_torchrl_outputs():
    # TorchRL 0.14.1's keys and shapes; the TD error goes to the batch only.
    torch.manual_seed(0)
    loss = REDQLoss(make_actor(), make_critic(), num_qvalue_nets=N, alpha_init=0.5)
    batch = make_batch(batch=(6,))
    out = loss(batch)
    assert set(out.keys()) == {
        "loss_actor",
        "loss_qvalue",
        "loss_alpha",
        "alpha",
        "entropy",
        "state_action_value_actor",
        "action_log_prob_actor",
        "next.state_value",
        "target_value",
    }
    assert out["state_action_value_actor"].shape == (N, 6)
    for key in ("action_log_prob_actor", "next.state_value", "target_value"):
        assert out[key].shape == (6,), key
    assert batch["td_error"].shape == (6,)
    # TorchRL's REDQ temperature loss is -alpha * (...), not SAC's -log(alpha) * (...).
    assert out["loss_alpha"].requires_grad and not torch.equal(out["loss_alpha"], torch.zeros(()))


def test_subset_changes_between_calls_and_bad_size():
    loss = REDQLoss(make_actor(), make_critic(), num_qvalue_nets=N, sub_sample_len=1)
    # distinct target critics: a different subset gives another target
    perturb_(loss.qvalue_network_target_params, 1.0)
    batch = make_batch()
    targets = set()
    for seed in range(6):
        torch.manual_seed(seed)
        targets.add(round(loss(batch)["target_value"].sum().item(), 5))
    assert len(targets) > 1
    with pytest.raises(ValueError, match="sub_sample_len must be in"):
        REDQLoss(make_actor(), make_critic(), num_qvalue_nets=3, sub_sample_len=4)


def test_shapes():
    loss = REDQLoss(make_actor(), make_critic(), num_qvalue_nets=N)
    batch = make_batch(batch=(2, 3))
    loss(batch)
    assert batch["td_error"].shape == (2, 3)
    nested = REDQLoss(make_actor(True), make_critic(True), num_qvalue_nets=N).set_keys(**NESTED)
    batch = make_batch(True, batch=(4,))
    nested(batch)
    assert batch["td_error"].shape == (4,)


def test_smoke_pendulum_critics_fit():
    """Random Pendulum transitions: the soft Bellman residual on a fixed batch halves."""
    torch.manual_seed(0)
    env = PendulumV1Env(batch_size=(8,))
    env.set_seed(0)
    data = env.rollout(64, break_when_any_done=False).reshape(-1)
    actor, critic = make_actor(obs=3, act=1), make_critic(obs=3, act=1)
    loss = REDQLoss(actor, critic, num_qvalue_nets=N, action_spec=env.action_spec, alpha_init=0.1)
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
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        optim.step()
        updater.step()
    assert residual() < 0.5 * start
