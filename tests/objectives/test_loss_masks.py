"""Validity masks in every loss (TorchRL's ``loss_mask_key``): ``("collector", "mask")`` and
``"shifted_valid"`` leave positions out of every ``loss_*`` term, as TorchRL 0.14.1's losses do.

Invalid rows hold NaN in an entry that reaches only their own loss elements (the reward, the
advantage, the dataset action): a masked loss value must not show it; other garbage there must
change neither the values nor the gradients.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.objectives import (
    A2CLoss,
    BCLoss,
    ClipPPOLoss,
    CQLLoss,
    DDPGLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    DQNLoss,
    DTLoss,
    IQLLoss,
    KLPENPPOLoss,
    OnlineDTLoss,
    PPOLoss,
    REDQLoss,
    ReinforceLoss,
    SACLoss,
    TD3BCLoss,
    TD3Loss,
)
from tdrl.objectives._mask import masked_reduce
from tdrl.specs import Bounded
from tdrl.testing import (
    make_action_value_net,
    make_categorical_actor,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from differential.masked_losses import CASES, differences

B = 6
VALID = torch.tensor([True, False, True, True, False, True])
SPEC = Bounded(-1.0, 1.0, (2,))


def _pg_batch(action: str) -> Callable[[nn.Module], TensorDictBase]:
    def build(actor: nn.Module) -> TensorDictBase:
        td = make_transition_batch(action=action)
        with torch.no_grad():
            dist = actor.get_dist(td.clone())
            td["action_log_prob"] = dist.log_prob(td["action"]) - 0.1 * torch.rand(B)
            td["logits"] = actor(td.clone())["logits"] + 0.1 * torch.randn(B, 2)
        td["advantage"] = torch.randn(B, 1)
        td["value_target"] = torch.randn(B, 1)
        return td

    return build


def _offpolicy(action: str) -> Callable[[nn.Module], TensorDictBase]:
    return lambda _: make_transition_batch(action=action)


def _dt_actor() -> TensorDictModule:
    return TensorDictModule(nn.Linear(3, 2), ["observation"], ["action"])


# name -> (loss builder, batch builder, the entries that reach only their own row's loss,
# deterministic: the loss on the valid rows alone is the masked loss)
LOSSES: dict[str, tuple[Callable[[], Any], Callable[[Any], TensorDictBase], list, bool]] = {
    "DQN": (
        lambda: DQNLoss(make_action_value_net(), action_space="one_hot"),
        _offpolicy("one_hot"),
        [("next", "reward")],
        True,
    ),
    "DDPG": (
        lambda: DDPGLoss(make_deterministic_actor(), make_qvalue_critic()),
        _offpolicy("continuous"),
        [("next", "reward")],
        True,
    ),
    "TD3": (
        lambda: TD3Loss(
            make_deterministic_actor(), make_qvalue_critic(), action_spec=SPEC, policy_noise=0.0
        ),
        _offpolicy("continuous"),
        [("next", "reward")],
        True,
    ),
    "TD3BC": (
        lambda: TD3BCLoss(
            make_deterministic_actor(), make_qvalue_critic(), action_spec=SPEC, policy_noise=0.0
        ),
        _offpolicy("continuous"),
        [("next", "reward")],
        False,  # its BC term and lmbd are whole-batch means, as TorchRL's
    ),
    "SAC": (
        lambda: SACLoss(make_tanh_normal_actor(), make_qvalue_critic()),
        _offpolicy("continuous"),
        [("next", "reward")],
        False,
    ),
    "DiscreteSAC": (
        lambda: DiscreteSACLoss(make_categorical_actor(), make_action_value_net(), num_actions=2),
        _offpolicy("one_hot"),
        [("next", "reward")],
        True,
    ),
    "REDQ": (
        lambda: REDQLoss(make_tanh_normal_actor(), make_qvalue_critic()),
        _offpolicy("continuous"),
        [("next", "reward")],
        False,
    ),
    "IQL": (  # its loss_qvalue is never masked, as TorchRL's (test_iql_qvalue_is_unmasked)
        lambda: IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net()),
        _offpolicy("continuous"),
        [],
        False,
    ),
    "DiscreteIQL": (
        lambda: DiscreteIQLLoss(
            make_categorical_actor(),
            TensorDictModule(nn.Linear(3, 2), ["observation"], ["state_action_value"]),
            make_state_value_net(),
            action_space="one_hot",
        ),
        _offpolicy("one_hot"),
        [("next", "reward")],
        True,
    ),
    "CQL": (
        lambda: CQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), action_spec=SPEC),
        _offpolicy("continuous"),
        [("next", "reward")],
        False,
    ),
    "DiscreteCQL": (
        lambda: DiscreteCQLLoss(make_action_value_net(), action_space="one_hot"),
        _offpolicy("one_hot"),
        [("next", "reward")],
        True,
    ),
    "PPO": (
        lambda: PPOLoss(make_categorical_actor(), make_state_value_net()),
        _pg_batch("one_hot"),
        ["advantage", "value_target"],
        True,
    ),
    "ClipPPO": (
        lambda: ClipPPOLoss(make_categorical_actor(), make_state_value_net(), entropy_coeff=0.1),
        _pg_batch("one_hot"),
        ["advantage", "value_target"],
        True,
    ),
    "KLPENPPO": (
        lambda: KLPENPPOLoss(make_categorical_actor(), make_state_value_net()),
        _pg_batch("one_hot"),
        ["advantage", "value_target"],
        False,  # beta's update reads the whole batch's KL, as TorchRL's
    ),
    "A2C": (
        lambda: A2CLoss(make_categorical_actor(), make_state_value_net()),
        _pg_batch("one_hot"),
        ["advantage", "value_target"],
        True,
    ),
    "Reinforce": (
        lambda: ReinforceLoss(make_categorical_actor(), make_state_value_net()),
        _pg_batch("one_hot"),
        ["advantage", "value_target"],
        True,
    ),
    "BC": (
        lambda: BCLoss(make_deterministic_actor(), loss_function="l2"),
        _offpolicy("continuous"),
        ["action"],
        True,
    ),
    "DT": (lambda: DTLoss(_dt_actor()), _offpolicy("continuous"), ["action"], True),
    "OnlineDT": (
        lambda: OnlineDTLoss(make_tanh_normal_actor(), target_entropy=-2.0),
        _offpolicy("continuous"),
        [],  # its dataset action feeds the likelihood only; NaN-free rows are compared
        False,
    ),
}


# Terms TorchRL 0.14.1 does not mask, or computes with whole-batch statistics.
WHOLE_BATCH_TERMS = {"IQL": ("loss_qvalue",), "TD3BC": ("loss_actor",), "KLPENPPO": ()}


def _setup(name: str, seed: int = 0) -> tuple[Any, TensorDictBase, list]:
    make_loss, make_batch, poison, _ = LOSSES[name]
    torch.manual_seed(seed)
    loss = make_loss()
    batch = make_batch(getattr(loss, "actor_network", None))
    return loss, batch, poison


def _poisoned(batch: TensorDictBase, poison: list, valid: torch.Tensor) -> TensorDictBase:
    batch = batch.clone()
    for key in poison:
        value = batch.get(key).clone()
        value[~valid] = float("nan")
        batch.set(key, value)
    return batch


def _run(loss: Any, batch: TensorDictBase, seed: int = 1) -> tuple[dict, dict]:
    """The loss terms of a fresh copy of ``loss`` and the gradient of their sum."""
    loss = copy.deepcopy(loss)
    torch.manual_seed(seed)
    out = loss(batch.clone())
    terms = {k: out.get(k) for k in out.keys() if k.startswith("loss_") or k == "loss"}
    total = sum(t for t in terms.values() if t.requires_grad)
    named = [(n, p) for n, p in loss.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(total, [p for _, p in named], allow_unused=True)
    return (
        {k: v.detach() for k, v in terms.items()},
        {n: g for (n, _), g in zip(named, grads, strict=True) if g is not None},
    )


def _assert_close(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)


def _finite(result: tuple[dict, dict]) -> bool:
    """Whether the loss values are finite (a NaN input of a masked row may still reach the
    gradient through the loss's own backward, e.g. ``2 * (pred - nan) * 0``, as in TorchRL)."""
    return all(bool(t.isfinite().all()) for t in result[0].values())


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_collector_mask_leaves_invalid_rows_out(name):
    loss, batch, poison = _setup(name)
    masked = _poisoned(batch, poison, VALID)
    masked["collector", "mask"] = VALID.clone()
    assert _finite(_run(loss, masked)), f"{name}: NaN of the masked rows leaked"
    clean = batch.clone()
    clean["collector", "mask"] = VALID.clone()
    got = _run(loss, clean)
    _assert_close(_run(loss, masked)[0], got[0])
    # Other garbage in the invalid rows: the same values and gradients (terms TorchRL
    # computes from whole-batch statistics aside).
    whole_batch = WHOLE_BATCH_TERMS.get(name, ())
    other = clean.clone()
    for key in [*poison, *([] if whole_batch else ["observation"])]:
        value = other.get(key).clone()
        value[~VALID] = 123.0
        other.set(key, value)
    garbage = _run(loss, other)
    _assert_close(
        *({k: v for k, v in r[0].items() if k not in whole_batch} for r in (garbage, got))
    )
    if not whole_batch:
        _assert_close(garbage[1], got[1])
    unmasked = _run(loss, batch)
    assert any(not torch.allclose(got[0][k], unmasked[0][k]) for k in got[0])
    if LOSSES[name][3]:  # per-sample loss: the masked loss is the loss of the valid rows
        rows = _run(loss, batch[VALID])
        _assert_close(got[0], rows[0])
        _assert_close(got[1], rows[1])


@pytest.mark.parametrize("name", ["DQN", "SAC", "PPO", "DiscreteIQL", "DT", "DiscreteCQL"])
def test_shifted_valid_and_both_masks_anded(name):
    loss, batch, poison = _setup(name)
    shifted = torch.tensor([True, True, True, True, False, True])
    collector = torch.tensor([True, False, True, True, True, True])
    only_shifted = _poisoned(batch, poison, shifted)
    only_shifted["shifted_valid"] = shifted.unsqueeze(-1)
    assert _finite(_run(loss, only_shifted))
    if LOSSES[name][3]:
        _assert_close(_run(loss, only_shifted)[0], _run(loss, batch[shifted])[0])
    both = _poisoned(batch, poison, VALID)
    both["shifted_valid"] = shifted.unsqueeze(-1)
    both["collector", "mask"] = collector
    assert _finite(_run(loss, both))
    clean_both = batch.clone().update(both.select("shifted_valid", "collector"))
    expected = batch.clone()
    expected["collector", "mask"] = VALID.clone()
    _assert_close(_run(loss, clean_both)[0], _run(loss, expected)[0])
    _assert_close(_run(loss, clean_both)[1], _run(loss, expected)[1])


@pytest.mark.parametrize("name", ["DQN", "SAC", "ClipPPO", "BC", "REDQ"])
def test_loss_mask_key_none_disables_and_a_custom_key_replaces(name):
    loss, batch, poison = _setup(name)
    masked = _poisoned(batch, poison, VALID)
    masked["collector", "mask"] = VALID.clone()
    assert loss.loss_mask_key == "auto"
    loss.loss_mask_key = None
    assert loss.loss_mask_key is None
    assert not _finite(_run(loss, masked))  # the NaN of the invalid rows counts
    custom = masked.clone()
    custom["my", "valid"] = VALID.clone()
    custom["collector", "mask"] = torch.ones(B, dtype=torch.bool)  # ignored
    loss.loss_mask_key = ("my", "valid")
    got = _run(loss, custom)
    assert _finite(got)
    loss.loss_mask_key = "auto"
    _assert_close(got[0], _run(loss, masked)[0])
    loss.loss_mask_key = "shifted_valid"  # one key: the collector mask is not read
    assert not _finite(_run(loss, masked))


def test_loss_mask_key_rejects_a_non_key():
    loss = DQNLoss(make_action_value_net(), action_space="one_hot")
    with pytest.raises(ValueError, match=r"DQNLoss.loss_mask_key: .*got 3"):
        loss.loss_mask_key = 3
    with pytest.raises(ValueError, match="loss_mask_key"):
        loss.loss_mask_key = ("collector", 1)
    loss.loss_mask_key = ("auto",)  # an entry named "auto", not the automatic discovery
    batch = make_transition_batch(action="one_hot")
    batch["collector", "mask"] = VALID.clone()
    batch["auto"] = torch.ones(B, dtype=torch.bool)
    assert torch.allclose(loss(batch.clone())["loss"], loss(batch.exclude("collector"))["loss"])


def test_bad_masks_are_named():
    loss = DQNLoss(make_action_value_net(), action_space="one_hot")
    batch = make_transition_batch(action="one_hot")
    batch["collector", "mask"] = VALID.float()
    with pytest.raises(TypeError, match=r"DQNLoss.forward: the mask \('collector', 'mask'\)"):
        loss(batch)
    batch["collector", "mask"] = torch.ones(B, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="cannot be applied to the loss"):
        loss(batch)


def test_priority_weights_with_a_mask():
    loss, batch, poison = _setup("DQN")
    weights = torch.linspace(0.2, 1.0, B)
    batch["priority_weight"] = weights
    masked = _poisoned(batch, poison, VALID)
    masked["collector", "mask"] = VALID.clone()
    clean = batch.clone()
    clean["collector", "mask"] = VALID.clone()
    rows = batch[VALID].clone()
    _assert_close(_run(loss, masked)[0], _run(loss, rows)[0])
    _assert_close(_run(loss, clean)[1], _run(loss, rows)[1])
    assert not torch.allclose(_run(loss, clean)[0]["loss"], _run(loss, batch)[0]["loss"])


def test_time_batches_with_a_trailing_unit_mask():
    torch.manual_seed(0)
    loss = A2CLoss(make_categorical_actor(), make_state_value_net())
    batch = make_transition_batch(batch=(2, 5), action="one_hot")
    with torch.no_grad():
        batch["sample_log_prob"] = loss.actor_network.get_dist(batch.clone()).log_prob(
            batch["action"]
        )
    batch["advantage"] = torch.randn(2, 5, 1)
    batch["value_target"] = torch.randn(2, 5, 1)
    valid = torch.tensor([[True] * 5, [True, True, True, False, False]])
    masked = _poisoned(batch, ["advantage", "value_target"], valid)
    masked["collector", "mask"] = valid.unsqueeze(-1)
    got = _run(loss, masked)
    assert _finite(got)
    _assert_close(got[0], _run(loss, batch[valid])[0])


def test_ppo_normalised_advantage_ignores_shifted_invalid_positions():
    # TorchRL's PPO: with "shifted_valid", the mean and the (population) std of the
    # advantage are taken over the valid positions only.
    torch.manual_seed(0)
    loss = PPOLoss(make_categorical_actor(), normalize_advantage=True, critic_network=None)
    batch = _pg_batch("one_hot")(loss.actor_network)
    batch["advantage"][~VALID] = 1e6  # far out: would dominate the statistics
    batch["shifted_valid"] = VALID.clone()
    adv = batch["advantage"][VALID]
    norm = (adv - adv.mean()) / adv.std(correction=0)
    manual = batch[VALID].clone()
    manual["advantage"] = norm
    plain = PPOLoss(make_categorical_actor(), normalize_advantage=False, critic_network=None)
    plain.load_state_dict(loss.state_dict())
    _assert_close(_run(loss, batch)[0], _run(plain, manual)[0])


def test_cql_alpha_loss_masks_with_its_batch():
    torch.manual_seed(0)
    loss = CQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), action_spec=SPEC)
    with torch.no_grad():
        loss.log_alpha.fill_(0.5)
    log_prob = torch.randn(B)
    meta = TensorDict({loss.tensor_keys.log_prob: log_prob}, [B])
    mask_td = TensorDict({("collector", "mask"): VALID}, [B])
    full, _ = loss.alpha_loss(meta)
    valid, _ = loss.alpha_loss(meta, mask_tensordict=mask_td)
    rows, _ = loss.alpha_loss(meta[VALID])
    assert not torch.allclose(full, valid)
    torch.testing.assert_close(valid, rows)


def test_masked_reduce_selects_rather_than_multiplies():
    values = torch.tensor([1.0, float("nan"), 3.0, float("inf")], requires_grad=True)
    mask = torch.tensor([True, False, True, False])
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mean = masked_reduce(values, mask)
    mean.backward()
    assert mean.item() == 2.0
    assert values.grad.tolist() == [0.5, 0.0, 0.5, 0.0]
    assert masked_reduce(values, mask, "mean", weights).item() == pytest.approx(10 / 4)
    assert masked_reduce(values, mask, "sum").item() == 4.0
    assert masked_reduce(values, mask, "none").tolist() == [1.0, 0.0, 3.0, 0.0]
    assert masked_reduce(values, torch.zeros(4, dtype=torch.bool)).item() == 0.0


# ---------------------------------------------------------------- TorchRL's numbers


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torchrl(name):
    assert differences(name) == []
