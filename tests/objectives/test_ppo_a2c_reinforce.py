"""A2C, PPO (plain, clipped, KL-penalised) and REINFORCE: contract and numerics."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

from tdrl.modules.distributions import OneHotCategorical
from tdrl.objectives import (
    GAE,
    A2CLoss,
    ClipPPOLoss,
    KLPENPPOLoss,
    PPOLoss,
    ReinforceLoss,
)
from tdrl.testing import LossContract

OBS, ACT, B, N = 3, 2, 6, 4


def _key(nested, name):
    return ("agents", name) if nested else name


def make_actor(nested=False):
    obs, logits, action = (_key(nested, k) for k in ("observation", "logits", "action"))
    return ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Linear(OBS, ACT), [obs], [logits]),
        ProbabilisticTensorDictModule(
            {"logits": logits}, [action], distribution_class=OneHotCategorical
        ),
    )


def make_critic(nested=False):
    return TensorDictModule(
        torch.nn.Linear(OBS, 1), [_key(nested, "observation")], [_key(nested, "state_value")]
    )


def make_batch(nested=False, with_advantage=True):
    torch.manual_seed(1)
    lead = (B, N) if nested else (B,)
    data = {
        _key(nested, "observation"): torch.randn(*lead, OBS),
        _key(nested, "action"): torch.eye(ACT)[torch.randint(ACT, lead)],
        _key(nested, "action_log_prob"): torch.log(torch.full(lead, 0.5)),
        _key(nested, "value_target"): torch.randn(*lead, 1),
        _key(nested, "state_value"): torch.randn(*lead, 1),
    }
    if with_advantage:
        data[_key(nested, "advantage")] = torch.randn(*lead, 1)
    td = TensorDict({}, [B])
    for k, v in data.items():
        td.set(k, v)
    return td


NESTED_KEYS = {
    name: ("agents", name if name != "value" else "state_value")
    for name in ("advantage", "value_target", "value", "action")
} | {"sample_log_prob": ("agents", "action_log_prob")}


class _Contract(LossContract):
    loss_cls: type = PPOLoss
    loss_terms = {"loss_objective", "loss_critic", "loss_entropy"}

    def make_loss(self, nested):
        return self.loss_cls(make_actor(nested), make_critic(nested))

    def make_batch(self, nested):
        return make_batch(nested)

    def nested_keys(self):
        return NESTED_KEYS

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


class TestPPOContract(_Contract):
    loss_cls = PPOLoss


class TestClipPPOContract(_Contract):
    loss_cls = ClipPPOLoss


def with_old_logits(batch, nested=False):
    """The collection-time logits KL-PEN rebuilds pi_old from (TorchRL's KLPENPPOLoss)."""
    lead = batch.get(_key(nested, "observation")).shape[:-1]
    batch.set(_key(nested, "logits"), torch.randn(*lead, ACT))
    return batch


class TestKLPENPPOContract(_Contract):
    loss_cls = KLPENPPOLoss

    def make_batch(self, nested):
        return with_old_logits(make_batch(nested), nested)


class TestA2CContract(_Contract):
    loss_cls = A2CLoss


class TestReinforceContract(_Contract):
    loss_cls = ReinforceLoss
    loss_terms = {"loss_actor", "loss_value"}


def _plain_pieces(actor, critic, batch):
    logits = actor[0].module(batch["observation"])
    logp_all = torch.log_softmax(logits, -1)
    idx = batch["action"].argmax(-1)
    logp = logp_all.gather(-1, idx.unsqueeze(-1))
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    value = critic.module(batch["observation"])
    return logp, entropy, value


def test_clip_ppo_matches_plain_implementation():
    actor, critic = make_actor(), make_critic()
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coef=0.05, critic_coef=0.5)
    batch = make_batch()
    out = loss(batch)
    logp, entropy, value = _plain_pieces(actor, critic, batch)
    adv = batch["advantage"]
    ratio = torch.exp(logp - batch["action_log_prob"].unsqueeze(-1))
    objective = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    critic_loss = 0.5 * torch.nn.functional.smooth_l1_loss(value, batch["value_target"])
    torch.testing.assert_close(out["loss_objective"], objective)
    torch.testing.assert_close(out["loss_entropy"], -0.05 * entropy.mean())
    torch.testing.assert_close(out["loss_critic"], critic_loss)
    # TorchRL's ratio diagnostics: ESS = (sum w)^2 / sum w^2 / B, the max and mean ratio.
    w = ratio.squeeze(-1).detach()
    torch.testing.assert_close(out["ESS"], w.sum() ** 2 / w.square().sum() / B)
    torch.testing.assert_close(out["max_ratio"], w.max())
    torch.testing.assert_close(out["mean_ratio"], w.mean())


def test_normalize_advantage_exclude_dims_keeps_each_agent_apart():
    # TorchRL: the statistics are taken over every dim but the excluded ones (agents).
    actor = make_actor(nested=True)
    loss = A2CLoss(
        actor, normalize_advantage=True, normalize_advantage_exclude_dims=(-2,)
    ).set_keys(**NESTED_KEYS)
    batch = make_batch(nested=True)
    adv = batch["agents", "advantage"] * torch.arange(1.0, N + 1).reshape(N, 1)
    batch["agents", "advantage"] = adv
    out = loss(batch)
    logits = actor[0].module(batch["agents", "observation"])
    logp = torch.log_softmax(logits, -1).gather(
        -1, batch["agents", "action"].argmax(-1, keepdim=True)
    )
    expected = (adv - adv.mean(0, keepdim=True)) / adv.std(0, keepdim=True)
    torch.testing.assert_close(out["loss_objective"], -(logp * expected).mean())
    with pytest.raises(TypeError, match="tuple of ints"):
        A2CLoss(actor, normalize_advantage_exclude_dims=-2)


def test_a2c_matches_plain_implementation_and_normalises():
    actor, critic = make_actor(), make_critic()
    loss = A2CLoss(actor, critic, loss_critic_type="l2", normalize_advantage=True)
    batch = make_batch()
    out = loss(batch)
    logp, _, value = _plain_pieces(actor, critic, batch)
    adv = batch["advantage"]
    adv = (adv - adv.mean()) / adv.std()
    torch.testing.assert_close(out["loss_objective"], -(logp * adv).mean())
    torch.testing.assert_close(out["loss_critic"], ((value - batch["value_target"]).pow(2)).mean())


def test_value_clipping_limits_the_critic_move():
    actor, critic = make_actor(), make_critic()
    batch = make_batch()
    far = batch.clone().set("state_value", batch["state_value"] + 100.0)
    clipped = PPOLoss(actor, critic, clip_value=0.1, loss_critic_type="l2")(far)["loss_critic"]
    free = PPOLoss(actor, critic, loss_critic_type="l2")(far)["loss_critic"]
    assert clipped > free


def test_missing_advantage_runs_the_estimator_like_gae_does():
    torch.manual_seed(0)
    actor, critic = make_actor(), make_critic()
    obs = torch.randn(2, 5, OBS)
    batch = TensorDict(
        {
            "observation": obs,
            "action": torch.eye(ACT)[torch.randint(ACT, (2, 5))],
            "action_log_prob": torch.full((2, 5), -0.69),
            "next": {
                "observation": torch.randn(2, 5, OBS),
                "reward": torch.randn(2, 5, 1),
                "done": torch.zeros(2, 5, 1, dtype=torch.bool),
                "terminated": torch.zeros(2, 5, 1, dtype=torch.bool),
            },
        },
        [2, 5],
    )
    loss = A2CLoss(actor, critic, entropy_bonus=False)
    loss.make_value_estimator("GAE", gamma=0.9, lmbda=0.8)
    out = loss(batch)
    assert "advantage" not in batch.keys()  # input untouched
    ref = GAE(gamma=0.9, lmbda=0.8, value_network=critic)(batch.clone())
    logp, _, _ = _plain_pieces(actor, critic, batch)
    torch.testing.assert_close(out["loss_objective"], -(logp * ref["advantage"]).mean())


def test_ppo_requires_the_collection_log_prob():
    batch = make_batch().exclude("action_log_prob")
    with pytest.raises(KeyError, match=r"action_log_prob.*return_log_prob=True"):
        ClipPPOLoss(make_actor())(batch)


def test_missing_advantage_without_critic_raises():
    batch = make_batch(with_advantage=False).exclude("state_value")
    with pytest.raises(KeyError, match="advantage 'advantage' is missing"):
        A2CLoss(make_actor())(batch)


def test_klpen_beta_adapts():
    loss = KLPENPPOLoss(make_actor(), dtarg=1e-6, beta=1.0)
    batch = with_old_logits(make_batch()).set("action_log_prob", torch.zeros(B))
    loss(batch)
    assert loss.beta.item() == pytest.approx(2.0)
    loss = KLPENPPOLoss(make_actor(), dtarg=100.0, beta=1.0)
    loss(with_old_logits(make_batch()))
    assert loss.beta.item() == pytest.approx(0.5)


def test_klpen_kl_is_torchrls_per_sample_kl_to_the_stored_policy():
    # TorchRL 0.14.1: pi_old is rebuilt from the batch's collection-time distribution
    # parameters; "kl" is KL(pi_old || pi) per sample ([B, 1]), the objective is
    # -mean(ratio * A - beta * kl), and "beta" is not an output.
    torch.manual_seed(0)
    actor = make_actor()
    loss = KLPENPPOLoss(actor, dtarg=0.01, beta=0.5, entropy_bonus=False)
    batch = with_old_logits(make_batch())
    out = loss(batch)
    logits = actor[0].module(batch["observation"])
    old = torch.distributions.Categorical(logits=batch["logits"])
    new = torch.distributions.Categorical(logits=logits)
    kl = torch.distributions.kl_divergence(old, new).unsqueeze(-1)
    logp = torch.log_softmax(logits, -1).gather(-1, batch["action"].argmax(-1, keepdim=True))
    ratio = (logp - batch["action_log_prob"].unsqueeze(-1)).exp()
    torch.testing.assert_close(out["kl"], kl.detach())
    torch.testing.assert_close(
        out["loss_objective"], -(ratio * batch["advantage"] - 0.5 * kl).mean()
    )
    assert "beta" not in out.keys() and out["kl_approx"].shape == ()
    with pytest.raises(KeyError, match="distribution parameters are missing"):
        loss(make_batch())


def test_reinforce_uses_monte_carlo_returns():
    actor = make_actor()
    batch = TensorDict(
        {
            "observation": torch.randn(1, 3, OBS),
            "action": torch.eye(ACT)[torch.tensor([[0, 1, 0]])],
            "state_value": torch.zeros(1, 3, 1),
            "next": {
                "state_value": torch.zeros(1, 3, 1),
                "reward": torch.tensor([[[1.0], [2.0], [4.0]]]),
                "done": torch.tensor([[[False], [False], [True]]]),
                "terminated": torch.tensor([[[False], [False], [True]]]),
            },
        },
        [1, 3],
    )
    loss = ReinforceLoss(actor)
    loss.make_value_estimator("TD1", gamma=0.5)
    out = loss(batch)
    returns = torch.tensor([[[1 + 0.5 * 2 + 0.25 * 4], [2 + 0.5 * 4], [4.0]]])
    logits = actor[0].module(batch["observation"])
    logp = torch.log_softmax(logits, -1).gather(-1, batch["action"].argmax(-1, keepdim=True))
    torch.testing.assert_close(out["loss_actor"], -(logp * returns).mean())


def test_multi_agent_advantages_are_per_agent():
    loss = ClipPPOLoss(make_actor(True), make_critic(True)).set_keys(**NESTED_KEYS)
    batch = make_batch(True)
    out = loss(batch)
    flipped = batch.clone()
    flipped.set(("agents", "advantage"), -batch["agents", "advantage"])
    assert not torch.allclose(loss(flipped)["loss_objective"], out["loss_objective"])
