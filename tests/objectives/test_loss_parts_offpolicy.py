"""TorchRL's per-part loss methods of SAC, discrete SAC, IQL, CQL, discrete CQL and DDPG."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.objectives import (
    CQLLoss,
    DDPGLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    IQLLoss,
    SACLoss,
)
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
)


def _seeded(fn, *args):
    torch.manual_seed(1)
    return fn(*args)


def _sac(**kwargs):
    torch.manual_seed(0)
    return SACLoss(make_tanh_normal_actor(), make_qvalue_critic(), **kwargs)


def test_sac_parts_equal_the_forward_terms():
    loss = _sac(alpha_init=2.0, target_entropy=-2.0)
    batch = make_transition_batch(batch=(6,))
    out = _seeded(loss, batch)
    q_loss, q_meta = _seeded(loss.qvalue_v2_loss, batch)
    torch.testing.assert_close(q_loss, out["loss_qvalue"])
    torch.testing.assert_close(q_meta["td_error"], batch["td_error"])
    assert "td_error" not in out.keys()  # TorchRL's output: the loss terms, alpha, entropy

    def actor_after_q(td):
        loss.qvalue_v2_loss(td)  # forward samples the critics' next actions first
        return loss.actor_loss(td)

    loss_actor, meta = _seeded(actor_after_q, batch)
    torch.testing.assert_close(loss_actor, out["loss_actor"])
    assert meta["log_prob"].shape == (6,) and not meta["log_prob"].requires_grad
    torch.testing.assert_close(-meta["log_prob"].mean(), out["entropy"])
    alpha_loss = loss.alpha_loss(meta["log_prob"])
    # -log(alpha) * (log pi + target_entropy), per element (forward averages it).
    expected = -math.log(2.0) * (meta["log_prob"] - 2.0)
    torch.testing.assert_close(alpha_loss, expected)
    torch.testing.assert_close(alpha_loss.mean(), out["loss_alpha"])
    alpha_loss.mean().backward()
    assert loss.log_alpha.grad is not None


def test_sac_alpha_loss_edge_cases():
    log_prob = torch.tensor([-1.0, 0.5])
    assert torch.equal(
        _sac(fixed_alpha=True, target_entropy=-1.0).alpha_loss(log_prob), torch.zeros(2)
    )
    with pytest.raises(RuntimeError, match="target entropy is unknown"):
        _sac().alpha_loss(log_prob)  # "auto" without an action spec
    with pytest.raises(NotImplementedError, match="SAC v1"):
        _sac().qvalue_v1_loss(make_transition_batch(batch=(2,)))


def test_discrete_sac_parts_equal_the_forward_terms():
    torch.manual_seed(0)
    loss = DiscreteSACLoss(
        make_categorical_actor(act=3),
        make_action_value_net(act=3),
        num_actions=3,
        action_space="one_hot",
        alpha_init=0.5,
    )
    batch = make_transition_batch(batch=(6,), action="one_hot", act=3)
    out = loss(batch)
    q_loss, q_meta = loss.qvalue_loss(batch)
    torch.testing.assert_close(q_loss, out["loss_qvalue"])
    torch.testing.assert_close(q_meta["td_error"], batch["td_error"])
    loss_actor, meta = loss.actor_loss(batch)
    torch.testing.assert_close(loss_actor, out["loss_actor"])
    # log_prob is E_pi[log pi] per state: minus the policy entropy.
    torch.testing.assert_close(-meta["log_prob"].mean(), out["entropy"])
    expected = -math.log(0.5) * (meta["log_prob"] + loss.target_entropy)
    torch.testing.assert_close(loss.alpha_loss(meta["log_prob"]), expected)
    torch.testing.assert_close(expected.mean(), out["loss_alpha"])


@pytest.mark.parametrize("discrete", [False, True])
def test_iql_parts_equal_the_forward_terms(discrete):
    torch.manual_seed(0)
    if discrete:
        loss = DiscreteIQLLoss(
            make_categorical_actor(), make_action_value_net(), make_state_value_net()
        ).set_keys(state_action_value="action_value")
        batch = make_transition_batch(batch=(6,), action="one_hot")
    else:
        actor, critic = make_tanh_normal_actor(), make_qvalue_critic()
        loss = IQLLoss(actor, critic, make_state_value_net(), expectile=0.7)
        batch = make_transition_batch(batch=(6,), bound=0.9)
    out = loss(batch)
    for method, key in [
        (loss.actor_loss, "loss_actor"),
        (loss.qvalue_loss, "loss_qvalue"),
        (loss.value_loss, "loss_value"),
    ]:
        part, meta = method(batch)
        torch.testing.assert_close(part, out[key])
        assert part.requires_grad
        if key == "loss_qvalue":
            torch.testing.assert_close(meta["td_error"], batch["td_error"])
        else:
            assert meta == {}


def test_iql_value_loss_is_the_expectile_regression():
    torch.manual_seed(0)
    loss = IQLLoss(
        make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net(), expectile=0.8
    )
    batch = make_transition_batch(batch=(6,), bound=0.9)
    loss.value_loss(batch)[0].backward()
    # Only the value network learns from value_loss.
    assert all(p.grad is None for p in loss.actor_network.parameters())
    assert all(p.grad is not None for p in loss.value_network.parameters())


def test_cql_parts():
    torch.manual_seed(0)
    loss = CQLLoss(
        make_tanh_normal_actor(), make_qvalue_critic(), target_entropy=-2.0, alpha_init=3.0
    )
    batch = make_transition_batch(batch=(6,), bound=0.9)
    out = _seeded(loss, batch)
    q_loss, q_meta = _seeded(loss.q_loss, batch)
    torch.testing.assert_close(q_loss, out["loss_qvalue"])
    torch.testing.assert_close(q_meta["td_error"], batch["td_error"])
    cql, cql_meta = _seeded(loss.cql_loss, batch)
    torch.testing.assert_close(cql, out["loss_cql"])
    assert cql_meta["cql_gap"].shape == () and "cql_gap" not in out.keys()
    loss_actor, meta = loss.actor_loss(batch)
    log_prob = meta["_log_prob"]  # TorchRL's CQL metadata key (tensor_keys.log_prob)
    assert loss_actor.requires_grad and log_prob.shape == (6,)
    loss_alpha, alpha_meta = loss.alpha_loss(meta)
    torch.testing.assert_close(loss_alpha, (-math.log(3.0) * (log_prob - 2.0)).mean())
    assert alpha_meta == {}
    loss.alpha_loss(meta, mask_tensordict=batch)  # no mask entries: allowed
    with pytest.raises(KeyError, match="_log_prob"):
        loss.alpha_loss({})
    masked = batch.clone()
    masked["shifted_valid"] = torch.tensor([True, True, False, True, True, True])
    loss_alpha_valid, _ = loss.alpha_loss(meta, mask_tensordict=masked)  # TorchRL's masking
    keep = masked["shifted_valid"]
    torch.testing.assert_close(loss_alpha_valid, (-math.log(3.0) * (log_prob[keep] - 2.0)).mean())
    renamed = loss.set_keys(log_prob="lp")
    assert "lp" in renamed.actor_loss(batch)[1]


def test_discrete_cql_parts_equal_the_forward_terms():
    torch.manual_seed(0)
    loss = DiscreteCQLLoss(make_action_value_net(act=3), action_space="categorical")
    batch = make_transition_batch(batch=(6,), action="index", act=3)
    out = loss(batch)
    value, meta = loss.value_loss(batch)
    torch.testing.assert_close(value, out["loss_qvalue"])
    # TorchRL: the metadata (and the output) hold the TD error's batch mean, the batch
    # the per-sample [B, 1] error.
    for key in ("td_error", "pred_value", "target_value"):
        torch.testing.assert_close(meta[key], out[key])
    assert batch["td_error"].shape == (6, 1)
    torch.testing.assert_close(out["td_error"], batch["td_error"].mean(0))
    cql, cql_meta = loss.cql_loss(batch)
    torch.testing.assert_close(cql, out["loss_cql"])
    # logsumexp_a Q(s, a) - Q(s, a_data), from the network's values.
    q = loss.value_network(batch.copy())["action_value"]
    gap = torch.logsumexp(q, -1) - q.gather(-1, batch["action"].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(cql, gap.mean())
    torch.testing.assert_close(cql_meta["cql_gap"], gap.mean().detach())


def test_ddpg_parts_equal_the_forward_terms():
    torch.manual_seed(0)
    loss = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())
    batch = make_transition_batch(batch=(6,))
    out = loss(batch)
    loss_value, meta = loss.loss_value(batch)
    torch.testing.assert_close(loss_value, out["loss_value"])
    for key in ("td_error", "pred_value", "pred_value_max", "target_value", "target_value_max"):
        torch.testing.assert_close(meta[key], out[key])
    loss_actor, actor_meta = loss.loss_actor(batch)
    assert actor_meta == {}
    acted = batch.copy()
    loss.actor_network(acted)
    expected = -loss.value_network(acted)["state_action_value"].mean()
    torch.testing.assert_close(loss_actor, expected)
    loss_actor.backward()  # trains the actor only
    assert all(p.grad is None for p in loss.value_network.parameters())
    assert all(p.grad is not None for p in loss.actor_network.parameters())


def test_parts_do_not_write_the_batch():
    # Only forward writes the TD error into the batch (TorchRL's priority pattern).
    loss = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())
    batch = make_transition_batch(batch=(4,))
    loss.loss_value(batch)
    assert "td_error" not in batch.keys()
    loss(batch)
    assert isinstance(batch, TensorDict) and "td_error" in batch.keys()
