"""The losses' fast paths give the general paths' results to the last bit.

Each fast path (a plain policy's distribution built from tensors, TanhNormal's unit box, ...)
is compared with the general path on the same seed: outputs with ``torch.equal`` and the
gradients of every parameter. A no-op forward hook on the policy sends it back to the
general path (``get_dist``), which gives the "before" of each comparison.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from tdrl.modules import MLP, NormalParamExtractor, TanhNormal
from tdrl.objectives import CQLLoss, DiscreteSACLoss, IQLLoss, REDQLoss, SACLoss
from tdrl.objectives._actor_plan import actor_plan, policy_dist
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_qvalue_critic,
    make_tanh_normal_actor,
    make_transition_batch,
)


def _general(actor: nn.Module) -> nn.Module:
    """A copy of ``actor`` that only takes the general path (a no-op hook on it)."""
    twin = copy.deepcopy(actor)
    twin.register_forward_hook(lambda *args: None)
    return twin


# ----------------------------------------------------------------- TanhNormal's unit box
def test_tanh_normal_unit_box_equals_the_general_box() -> None:
    loc = torch.randn(64, 3, requires_grad=True)
    raw = torch.randn(64, 3, requires_grad=True)
    outs = []
    for low, high in ((-1.0, 1.0), (torch.tensor(-1.0), torch.tensor(1.0))):
        scale = torch.nn.functional.softplus(raw) + 1e-3
        dist = TanhNormal(loc, scale, low=low, high=high)
        assert dist._unit is isinstance(low, float)
        torch.manual_seed(0)
        sample, log_prob = dist.rsample_and_log_prob((2,))
        values = torch.tensor([-1.0, -0.5, 0.0, 0.999, 1.0]).repeat(64, 1)[:, :3]
        scored = dist.log_prob(values)
        total = sample.sum() + log_prob.sum() + scored.sum() + dist.mode.sum() + dist.mean.sum()
        grads = torch.autograd.grad(total, [loc, raw])
        outs.append((sample, log_prob, scored, dist.mode, dist.mean, *grads))
    for fast, general in zip(*outs, strict=True):
        assert torch.equal(fast, general)


def test_tanh_normal_other_boxes_still_scale() -> None:
    dist = TanhNormal(torch.zeros(2), torch.ones(2), low=0.0, high=4.0)
    assert not dist._unit
    assert torch.equal(dist.mode, torch.full((2,), 2.0))


# ----------------------------------------------------------------- the policy's distribution
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("kind", ["tanh_normal", "categorical"])
def test_policy_dist_equals_get_dist(kind: str, nested: bool) -> None:
    torch.manual_seed(0)
    make = make_tanh_normal_actor if kind == "tanh_normal" else make_categorical_actor
    actor = make(nested=nested)
    general = _general(actor)
    assert actor_plan(actor) is not None and actor_plan(general) is None
    batch = make_transition_batch(batch=(5,), nested=nested)
    before = set(batch.keys(True, True))
    results = []
    for policy in (actor, general):
        td = batch.copy()
        dist = policy_dist(policy, td)
        torch.manual_seed(1)
        sample = dist.rsample() if kind == "tanh_normal" else dist.sample()
        log_prob = dist.log_prob(sample)
        grads = torch.autograd.grad(log_prob.sum(), list(policy.parameters()))
        results.append((sample, log_prob, *grads))
        if policy is actor:
            assert set(td.keys(True, True)) == before  # the fast path writes nothing
    for fast, slow in zip(*results, strict=True):
        assert torch.equal(fast, slow)


def test_policy_dist_follows_a_hook_added_later() -> None:
    actor = make_tanh_normal_actor()
    batch = make_transition_batch(batch=(3,))
    td = batch.copy()
    policy_dist(actor, td)
    assert "loc" not in td.keys()
    calls = []
    actor.module[0].register_forward_hook(lambda *args: calls.append(1))
    td = batch.copy()
    policy_dist(actor, td)
    assert calls == [1] and "loc" in td.keys()  # get_dist ran the module and wrote its output


def test_policy_dist_missing_input_raises_the_general_error() -> None:
    actor = make_tanh_normal_actor()
    td = TensorDict(other=torch.zeros(3, 3), batch_size=[3])
    with pytest.raises(KeyError, match="observation"):
        policy_dist(actor, td)


def test_only_plain_policies_get_a_plan() -> None:
    net = nn.Sequential(MLP(3, 4, num_cells=8), NormalParamExtractor())
    prob = ProbabilisticTensorDictModule(
        ["loc", "scale"], ["action"], distribution_class=TanhNormal
    )
    plain = ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]), prob
    )
    assert actor_plan(plain) is not None
    three = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Identity(), ["observation"], ["hidden"]),
        TensorDictModule(net, ["hidden"], ["loc", "scale"]),
        prob,
    )
    assert actor_plan(three) is None
    from_batch = ProbabilisticTensorDictSequential(  # the scale is read from the batch
        TensorDictModule(MLP(3, 2, num_cells=8), ["observation"], ["loc"]), prob
    )
    assert actor_plan(from_batch) is None
    assert actor_plan(TensorDictModule(net, ["observation"], ["loc", "scale"])) is None


# ----------------------------------------------------------------- whole losses, before/after
def _losses(kind: str):
    if kind == "discrete_sac":
        actor, critic = make_categorical_actor(), make_action_value_net()
        return actor, lambda a: DiscreteSACLoss(
            a, copy.deepcopy(critic), num_actions=2, action_space="one_hot"
        )
    actor, critic = make_tanh_normal_actor(), make_qvalue_critic()
    value = TensorDictModule(MLP(3, 1, num_cells=16), ["observation"], ["state_value"])
    build = {
        "sac": lambda a: SACLoss(a, copy.deepcopy(critic)),
        "redq": lambda a: REDQLoss(a, copy.deepcopy(critic), num_qvalue_nets=4),
        "cql": lambda a: CQLLoss(a, copy.deepcopy(critic), num_random=3),
        "iql": lambda a: IQLLoss(a, copy.deepcopy(critic), value_network=copy.deepcopy(value)),
    }[kind]
    return actor, build


@pytest.mark.parametrize("kind", ["sac", "discrete_sac", "redq", "cql", "iql"])
def test_loss_outputs_and_gradients_equal_the_general_path(kind: str) -> None:
    torch.manual_seed(0)
    actor, build = _losses(kind)
    action = "one_hot" if kind == "discrete_sac" else None
    batch = make_transition_batch(batch=(6,), **({"action": action} if action else {}))
    results = []
    for policy in (actor, _general(actor)):
        torch.manual_seed(2)
        loss = build(copy.deepcopy(policy) if policy is actor else policy)
        written = batch.clone()
        out = loss(written)
        total = sum(v for k, v in out.items() if k.startswith("loss_"))
        params = [p for p in loss.parameters() if p.requires_grad]
        grads = torch.autograd.grad(total, params, allow_unused=True)
        results.append((out.detach(), written.exclude(*batch.keys(True, True)), grads))
    (out_a, written_a, grads_a), (out_b, written_b, grads_b) = results
    assert set(out_a.keys(True, True)) == set(out_b.keys(True, True))
    for key in out_a.keys(True, True):
        assert torch.equal(out_a[key], out_b[key]), key
    assert (written_a == written_b).all()
    for a, b in zip(grads_a, grads_b, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
