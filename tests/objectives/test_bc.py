"""BCLoss: TorchRL 0.14.1's values and gradients, contract, errors, learning an expert's actions."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import ExplorationType, set_exploration_type
from tdrl.objectives import BCLoss
from tdrl.testing import (
    LossContract,
    make_categorical_actor,
    make_deterministic_actor,
    make_tanh_normal_actor,
    make_transition_batch,
)

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

from differential.offline_losses import CASES, differences  # noqa: E402


@pytest.mark.parametrize("name", sorted(c for c in CASES if c.startswith("bc/")))
def test_matches_torchrl(name):
    # The loss and the gradient of every parameter, as TorchRL 0.14.1 computed them (recorded by
    # tools/differential/offline_losses.py): MSE/NLL/cross-entropy choice, every loss_function,
    # reductions, padding and collector masks, the legacy "action" prediction key.
    assert differences(name) == []


class TestBCContract(LossContract):
    loss_terms = {"loss_bc"}

    def make_loss(self, nested):
        return BCLoss(make_deterministic_actor(nested))

    def make_batch(self, nested):
        return make_transition_batch(nested)

    def nested_keys(self):
        return {"action": ("agents", "action")}

    def trained_params(self, loss):
        return {n for n, _ in loss.named_parameters()}


def _batch(n=6, obs=3, act=2):
    return TensorDict(observation=torch.randn(n, obs), action=torch.rand(n, act), batch_size=[n])


def test_missing_action_names_the_key():
    loss = BCLoss(make_deterministic_actor())
    with pytest.raises(KeyError, match=r"'action'.*observation"):
        loss(_batch().exclude("action"))
    loss.set_keys(action=("expert", "action"))
    with pytest.raises(KeyError, match=r"\('expert', 'action'\)"):
        loss(_batch())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"loss_function": "huber"}, "loss_function"), ({"reduction": "avg"}, "reduction")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BCLoss(make_deterministic_actor(), **kwargs)


def test_actor_that_writes_no_prediction_raises():
    actor = TensorDictModule(nn.Linear(3, 2), ["observation"], ["other"])
    with pytest.raises(RuntimeError, match="no prediction at the action key 'action'"):
        BCLoss(actor)(_batch())


def test_actor_writing_action_under_another_key_warns_and_is_used():
    loss = BCLoss(make_deterministic_actor(), loss_function="l1")
    loss.set_keys(action="expert_action")
    data = _batch().rename_key_("action", "expert_action")
    with pytest.warns(FutureWarning, match="'action'"):
        got = loss(data)["loss_bc"]
    pred = loss.actor_network(data.copy())["action"]
    torch.testing.assert_close(got, (pred - data["expert_action"]).abs().mean())


def test_padding_mask_errors_and_set_keys_none():
    data = _batch()
    data["pad"] = torch.zeros(6, 2, dtype=torch.long)
    loss = BCLoss(make_deterministic_actor(), loss_function="l1")
    loss.set_keys(pad_mask="pad")
    with pytest.raises(TypeError, match="'pad' is not boolean"):
        loss(data)
    nll = BCLoss(make_tanh_normal_actor()).set_keys(pad_mask="pad")
    data["pad"] = torch.zeros(6, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="more dims than the loss"):
        nll(data)
    # pad_mask=None: no masking again (TorchRL's default), the whole batch counts.
    data["pad"] = torch.ones(6, 2, dtype=torch.bool)
    assert loss(data)["loss_bc"] == 0
    loss.set_keys(pad_mask=None)
    assert loss.tensor_keys.pad_mask is None and loss(data)["loss_bc"] > 0


def test_discrete_one_hot_probabilities_as_cross_entropy_target():
    # A float expert action of the logits' shape is a class distribution (F.cross_entropy's
    # probability targets), not an index.
    actor = TensorDictModule(nn.Linear(3, 4), ["observation"], ["action"])
    data = _batch()
    index = torch.tensor([0, 1, 2, 3, 1, 0])
    data["action"] = nn.functional.one_hot(index, 4).float()
    got = BCLoss(actor, loss_function="cross_entropy")(data)["loss_bc"]
    logits = actor(data.copy())["action"]
    torch.testing.assert_close(got, nn.functional.cross_entropy(logits, index))


def test_categorical_policy_log_likelihood_over_batch_dims():
    # A stochastic discrete policy ("logits" out key): -log pi(a|s) of the one-hot expert
    # action, on a [2, 3] batch.
    actor = make_categorical_actor(act=4)
    data = make_transition_batch(batch=(2, 3), act=4, action="one_hot")
    out = BCLoss(actor, reduction="none")(data)["loss_bc"]
    logits = actor(data.copy())["logits"]
    expected = -(torch.log_softmax(logits, -1) * data["action"]).sum(-1)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("make", [make_tanh_normal_actor, make_categorical_actor])
def test_stochastic_policy_compiles_without_graph_breaks(make):
    loss = BCLoss(make())
    data = make_transition_batch(
        action="one_hot" if make is make_categorical_actor else "continuous"
    )
    expected = loss(data)["loss_bc"]
    loss.compile(backend="eager", fullgraph=True)
    torch.testing.assert_close(loss(data)["loss_bc"], expected)


def test_shim_module_path():
    from tdrl.objectives.bc import BCLoss as shim

    assert shim is BCLoss


def _expert_data(n, obs=3, act=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(obs, act, generator=gen)
    observation = torch.randn(n, obs, generator=gen)
    action = torch.tanh(observation @ weight)
    return TensorDict(observation=observation, action=action, batch_size=[n])


@pytest.mark.parametrize("stochastic", [False, True])
def test_cloning_an_expert_reaches_its_actions(stochastic):
    # BC on a fixed expert dataset (a = tanh(W s)): the loss falls and the policy's
    # deterministic actions match the expert's on held-out states.
    torch.manual_seed(0)
    full = _expert_data(n=640)
    data, held_out = full[:512], full[512:]  # held out: states the policy never trained on
    actor = make_tanh_normal_actor() if stochastic else make_deterministic_actor()
    loss = BCLoss(actor)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    first = last = None
    for step in range(400):
        index = torch.randint(0, 512, (64,))
        value = loss(data[index])["loss_bc"]
        optim.zero_grad()
        value.backward()
        optim.step()
        first = value.item() if step == 0 else first
        last = value.item()
    assert last < first - (1.0 if stochastic else 0.05)
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        pred = loss.actor_network(held_out.exclude("action"))["action"]
    assert (pred - held_out["action"]).abs().mean() < 0.1


def test_torchrl_key_names_and_defaults():
    # TorchRL 0.14.1's BCLoss._AcceptedKeys, no more, no less.
    loss = BCLoss(make_deterministic_actor())
    fields = {f.name: getattr(loss.tensor_keys, f.name) for f in dataclasses.fields(loss.Keys)}
    assert fields == {"action": "action", "pad_mask": None}
    assert loss.reduction == "mean" and loss.loss_function is None
