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
from tdrl.objectives._actor_plan import actor_plan, policy_dist_acted
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
        dist, read, replace = policy_dist_acted(policy, td)
        assert (read is td) is (policy is actor) and bool(replace) is (policy is actor)
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
    _, read, replace = policy_dist_acted(actor, batch)
    assert read is batch and sorted(replace) == ["loc", "scale"] and "loc" not in batch.keys()
    calls = []
    actor.module[0].register_forward_hook(lambda *args: calls.append(1))
    _, read, replace = policy_dist_acted(actor, batch)
    # get_dist ran the module (its hook) and wrote into a copy, not into the batch
    assert calls == [1] and not replace and "loc" in read.keys() and "loc" not in batch.keys()


def test_policy_dist_missing_input_raises_the_general_error() -> None:
    actor = make_tanh_normal_actor()
    td = TensorDict(other=torch.zeros(3, 3), batch_size=[3])
    with pytest.raises(KeyError, match="observation"):
        policy_dist_acted(actor, td)


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


# ----------------------------------------------------------------- the eager safe tanh
def test_eager_safe_tanh_equals_the_transform_friendly_one() -> None:
    from tdrl.modules.distributions._tanh_normal import _EagerSafeTanh, _SafeTanh

    x = torch.cat([torch.randn(50) * 3, torch.tensor([-30.0, -9.5, 0.0, 9.5, 30.0])])
    results = []
    for function in (_EagerSafeTanh, _SafeTanh):
        leaf = x.clone().requires_grad_(True)
        y = function.apply(leaf)
        (grad,) = torch.autograd.grad((y * torch.arange(55.0)).sum(), leaf)
        results.append((y, grad))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_safe_tanh_still_works_under_vmap_and_grad() -> None:
    loc, scale = torch.randn(4, 3), torch.rand(4, 3) + 0.5

    def mode(loc_row: torch.Tensor) -> torch.Tensor:
        return TanhNormal(loc_row, torch.ones_like(loc_row)).mode.sum()

    grads = torch.func.vmap(torch.func.grad(mode))(loc)  # the setup_context class
    eager = loc.clone().requires_grad_(True)
    TanhNormal(eager, scale).mode.sum().backward()
    assert torch.equal(grads, eager.grad)


# ----------------------------------------------------------------- detached weights, read as used
def _both_ways(call, module: nn.Module) -> None:
    """``call(td, fast)`` gives the same values and action gradients both ways, and no gradient
    reaches ``module``'s parameters on the fast way."""
    batch = make_transition_batch(batch=(5,))
    results = []
    params = [p for p in module.parameters() if p.requires_grad]
    for fast in (True, False):
        action = batch["action"].clone().requires_grad_(True)
        values = call(batch.clone().set("action", action), fast)
        weights = torch.arange(float(values.numel())).view(values.shape)
        grads = torch.autograd.grad((values * weights).sum(), [action, *params], allow_unused=True)
        if fast:
            assert all(g is None for g in grads[1:])  # the weights were detached as read
        results.append((values.detach(), grads[0]))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_ensemble_detach_equals_running_on_detached_params() -> None:
    from tdrl.objectives._ensemble import QEnsemble

    ensemble = QEnsemble(make_qvalue_critic(), num_copies=3)

    def call(td: TensorDict, fast: bool) -> torch.Tensor:
        values = ensemble(td, detach=True) if fast else ensemble(td, ensemble.params.detach())
        assert values.shape == (3, 5, 1)
        return values

    _both_ways(call, ensemble)


def test_call_with_own_detached_weights_equals_the_detached_tensordict() -> None:
    from tdrl.objectives._utils import call_with_params, detached, plain_layers

    critic = make_qvalue_critic()
    layers = plain_layers(critic)
    assert layers is not None
    key = "state_action_value"

    def call(td: TensorDict, fast: bool) -> torch.Tensor:
        if fast:
            return call_with_params(critic, layers, td, None, key, "test", detach=True)
        return call_with_params(critic, layers, td, detached(critic), key, "test")

    _both_ways(call, critic)


def test_dqn_l2_priority_is_the_squared_error() -> None:
    from tdrl.objectives import DQNLoss

    loss = DQNLoss(make_action_value_net(), action_space="one_hot")
    batch = make_transition_batch(batch=(6,), action="one_hot")
    pred, target, _ = loss._qvalue_terms(batch)
    loss(batch)
    assert torch.equal(batch["td_error"], (pred - target).detach().square())


def test_ensemble_member_equals_indexing_the_detached_params() -> None:
    from tdrl.objectives._ensemble import QEnsemble

    ensemble = QEnsemble(make_qvalue_critic(), num_copies=3)

    def call(td: TensorDict, fast: bool) -> torch.Tensor:
        if fast:
            value = ensemble(td, detach=True, member=1)
        else:
            value = ensemble(td, ensemble.params.detach()[1])
        assert value.shape == (5, 1)
        return value

    _both_ways(call, ensemble)


def test_ensemble_reads_the_same_parameter_objects_as_get() -> None:
    from tdrl.objectives._ensemble import QEnsemble
    from tdrl.objectives._utils import _plain_tensordict

    ensemble = QEnsemble(make_qvalue_critic(), num_copies=2)
    inner = _plain_tensordict(ensemble.params)
    assert inner is not ensemble.params
    for key in ensemble.params.keys(True, True):
        assert inner.get(key) is ensemble.params.get(key)
    ensemble.params.register_get_post_hook(lambda td, value: value * 1)  # hooks: the general get
    assert _plain_tensordict(ensemble.params) is ensemble.params


@pytest.mark.parametrize("kind", ["ddpg", "td3"])
def test_deterministic_actor_losses_equal_the_copy_and_act_path(kind: str) -> None:
    from tdrl.objectives import DDPGLoss, TD3Loss
    from tdrl.testing import make_deterministic_actor

    torch.manual_seed(0)
    actor, critic = make_deterministic_actor(), make_qvalue_critic()
    batch = make_transition_batch(batch=(6,))
    results = []
    for general, policy in enumerate((actor, _general(actor))):  # hooked: copy and act
        torch.manual_seed(3)
        policy = copy.deepcopy(policy)
        if kind == "ddpg":
            loss = DDPGLoss(policy, copy.deepcopy(critic))
        else:
            loss = TD3Loss(policy, copy.deepcopy(critic), bounds=(-1.0, 1.0))
        assert (loss._actor_layers is None) is bool(general)
        out = loss(batch.clone())
        total = sum(v for k, v in out.items() if k.startswith("loss_"))
        params = [p for p in loss.parameters() if p.requires_grad]
        results.append((out.detach(), torch.autograd.grad(total, params)))
    (out_a, grads_a), (out_b, grads_b) = results
    for key in out_a.keys(True, True):
        assert torch.equal(out_a[key], out_b[key]), key
    for a, b in zip(grads_a, grads_b, strict=True):
        assert torch.equal(a, b)


def test_direct_weight_reads_equal_get() -> None:
    from tdrl.objectives._ensemble import QEnsemble
    from tdrl.objectives._utils import _entry, _node, _plain_tensordict

    ensemble = QEnsemble(make_qvalue_critic(), num_copies=2)
    for params in (_plain_tensordict(ensemble.params), ensemble.params.detach(), ensemble.params):
        for key in params.keys(True, True):
            assert _entry(_node(params, key[:-1]), key[-1]) is params.get(key)
    detached = ensemble.params.detach()  # a path that is not there: what get gives
    assert _node(detached, ("module", "missing")) is detached.get(("module", "missing"))
