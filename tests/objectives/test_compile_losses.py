"""torch.compile and tdrl's losses: checked arguments, compiled update steps equal to eager.

Most cases trace with the ``aot_eager`` backend (dynamo + AOT autograd, no code generation:
seconds, not tens of seconds); two small inductor cases check generated code and the eager
random numbers (``fallback_random``).
"""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import LSTMModule
from tdrl.objectives import (
    A2CLoss,
    DQNLoss,
    HardUpdate,
    LossModule,
    SACLoss,
    SoftUpdate,
    TD3Loss,
)
from tdrl.testing import (
    agents_keys,
    make_action_value_net,
    make_deterministic_actor,
    make_qvalue_critic,
    make_state_value_net,
    make_tanh_normal_actor,
    make_transition_batch,
)

CONTINUOUS_NESTED = agents_keys("action", "state_action_value", "reward", "done", "terminated")
DQN_NESTED = agents_keys("action_value", "action", "reward", "done", "terminated")


def make_setup(kind: str, nested: bool) -> tuple[LossModule, TensorDictBase]:
    torch.manual_seed(0)
    if kind == "dqn":
        loss: LossModule = DQNLoss(make_action_value_net(nested), action_space="categorical")
        keys = DQN_NESTED
        batch = make_transition_batch(nested, action="index")
    else:
        if kind == "sac":
            loss = SACLoss(make_tanh_normal_actor(nested), make_qvalue_critic(nested))
        else:
            loss = TD3Loss(
                make_deterministic_actor(nested), make_qvalue_critic(nested), bounds=(-1.0, 1.0)
            )
        keys = CONTINUOUS_NESTED
        batch = make_transition_batch(nested)
    if nested:
        loss.set_keys(**keys)
    return loss.make_value_estimator(gamma=0.9), batch


def make_update(loss: LossModule, hard: bool = False):
    """A TorchRL-style update step: loss, backward, Adam step, target update."""
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    updater: SoftUpdate | HardUpdate = SoftUpdate(loss, tau=0.1)
    if hard:
        updater = HardUpdate(loss, value_network_update_interval=2)

    def update(batch: TensorDictBase) -> TensorDictBase:
        out = loss(batch)
        total = sum(v for k, v in out.items() if k == "loss" or k.startswith("loss_"))
        optim.zero_grad()
        total.backward()
        optim.step()
        updater.step()
        return out.detach()

    return update


def run_steps(
    loss: LossModule, batch: TensorDictBase, compile_kwargs: dict | None, steps: int, hard=False
):
    """``steps`` updates from seed 1: per-step outputs and batches, first grads, final state."""
    update = make_update(loss, hard)
    if compile_kwargs is not None:
        update = torch.compile(update, **compile_kwargs)
    torch.manual_seed(1)
    outs, batches, grads = [], [], None
    for _ in range(steps):
        data = batch.clone()
        outs.append(update(data))
        batches.append(data)
        if grads is None:
            grads = {n: p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None}
    return outs, batches, grads, {k: v.detach().clone() for k, v in loss.state_dict().items()}


def assert_same_run(got, expected, **tol):
    for out_g, out_e in zip(got[0], expected[0]):  # loss terms and diagnostics, every step
        assert set(out_g.keys(True, True)) == set(out_e.keys(True, True))
        for key in out_e.keys(True, True):
            torch.testing.assert_close(out_g.get(key), out_e.get(key), msg=str(key), **tol)
    for b_g, b_e in zip(got[1], expected[1]):  # the batch: only the TD error was written
        assert set(b_g.keys(True, True)) == set(b_e.keys(True, True))
        torch.testing.assert_close(b_g.get("td_error"), b_e.get("td_error"), **tol)
    assert got[2].keys() == expected[2].keys() and got[2]  # gradients of the first step
    for name in expected[2]:
        torch.testing.assert_close(got[2][name], expected[2][name], msg=name, **tol)
    for name in expected[3]:  # parameters and targets after the last step
        torch.testing.assert_close(got[3][name], expected[3][name], msg=name, **tol)


class CountingAotEager:
    """The ``aot_eager`` backend, counting the graphs it compiles (so that a test sees the
    compilation happened, not only that the results agree)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)


# ------------------------------------------------------------------ compiled losses and updates
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("kind", ["sac", "td3", "dqn"])
def test_compiled_loss_equals_eager(kind, nested):
    # loss.compile(): loss values, TD errors, gradients (AOT autograd's backward graph), then
    # parameters and targets after 3 Adam steps and target updates.
    loss, batch = make_setup(kind, nested)
    twin = copy.deepcopy(loss)
    backend = CountingAotEager()
    twin.compile(backend=backend, fullgraph=True)
    assert_same_run(run_steps(twin, batch, None, 3), run_steps(loss, batch, None, 3))
    assert backend.graphs > 0


@pytest.mark.parametrize("hard", [False, True])
def test_compiled_update_step_equals_eager(hard):
    # TorchRL's pattern: torch.compile(update), the target updater (soft or hard) inside.
    loss, batch = make_setup("dqn", nested=False)
    twin = copy.deepcopy(loss)
    expected = run_steps(loss, batch, None, 3, hard)
    backend = CountingAotEager()
    assert_same_run(run_steps(twin, batch, {"backend": backend}, 3, hard), expected)
    assert backend.graphs > 0


# Inductor compiles C++: the first compilation on a machine (cold cache) takes tens of seconds.
@pytest.mark.timeout(300)
def test_inductor_compiled_loss_equals_eager():
    # Generated code for the forward and backward graphs (small DQN network).
    loss, batch = make_setup("dqn", nested=False)
    twin = copy.deepcopy(loss)
    twin.compile()
    expected = run_steps(loss, batch, None, 2)
    assert_same_run(run_steps(twin, batch, None, 2), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(300)
def test_inductor_compiled_loss_draws_the_eager_random_numbers():
    # SAC samples actions: with inductor's own generator the values would differ.
    loss, batch = make_setup("sac", nested=False)
    twin = copy.deepcopy(loss)
    twin.compile()
    eager_batch, compiled_batch = batch.clone(), batch.clone()
    with torch.no_grad():
        torch.manual_seed(3)
        expected = loss(eager_batch)
        torch.manual_seed(3)
        got = twin(compiled_batch)
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "entropy"):
        torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-5, msg=key)
    torch.testing.assert_close(
        compiled_batch["td_error"], eager_batch["td_error"], rtol=1e-4, atol=1e-5
    )


def test_compiled_update_with_a_gae_estimator_inside():
    # A2C computes its advantages with the GAE estimator inside the compiled forward.
    torch.manual_seed(0)
    actor = make_tanh_normal_actor()
    loss = A2CLoss(actor, make_state_value_net())
    loss.make_value_estimator("GAE", gamma=0.9, lmbda=0.8)
    batch = make_transition_batch(batch=(2, 5))
    with torch.no_grad():
        batch.set("sample_log_prob", actor.get_dist(batch).log_prob(batch["action"]))
    twin = copy.deepcopy(loss)
    twin.compile(backend="eager", fullgraph=True)
    for net in (loss, twin):
        torch.manual_seed(1)  # the entropy of a TanhNormal is estimated from samples
        out = net(batch.clone())
        sum(v for k, v in out.items() if k.startswith("loss_")).backward()
    for (name, p), q in zip(loss.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


# ------------------------------------------------------------------ LossModule.compile
class _SequenceLoss(LossModule):
    """The mean output of an LSTM over [B, T] data (right only in sequence mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = LSTMModule(3, 4, in_key="x", out_key="y")

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        return TensorDict(loss_y=self.lstm(td.copy())["y"].mean())


def test_compiled_recurrent_loss_keeps_sequence_mode():
    torch.manual_seed(0)
    loss = _SequenceLoss()
    data = TensorDict(
        {
            "x": torch.randn(2, 5, 3),
            "is_init": torch.zeros(2, 5, 1, dtype=torch.bool),
            "recurrent_state_h": torch.zeros(2, 5, 1, 4),
            "recurrent_state_c": torch.zeros(2, 5, 1, 4),
        },
        [2, 5],
    )
    expected = loss(data.clone())["loss_y"]
    step_mode = loss.lstm(data.clone())["y"].mean()  # outside the loss: step mode
    assert not torch.allclose(expected, step_mode)  # the mode matters for this data
    loss.compile(backend="eager")
    torch.testing.assert_close(loss(data.clone())["loss_y"], expected)


def test_compile_with_a_lazy_network_builds_its_target_first():
    torch.manual_seed(0)
    net = TensorDictModule(
        nn.Sequential(nn.LazyLinear(8), nn.Tanh(), nn.Linear(8, 2)),
        ["observation"],
        ["action_value"],
    )
    loss = DQNLoss(net, action_space="categorical")
    loss.compile(backend="eager")
    batch = make_transition_batch(action="index")
    out = loss(batch)
    target = loss.target_value_network_params
    assert torch.isfinite(out["loss"]) and target["module", "0", "weight"].shape == (8, 3)


def test_compile_keeps_state_dict_keys_and_the_eager_loss_usable():
    loss, batch = make_setup("td3", nested=False)
    keys = list(loss.state_dict())
    loss.compile(backend="eager")
    assert list(loss.state_dict()) == keys
    assert "loss_actor" in loss(batch).keys()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"fulgraph": True}, TypeError, r"unknown torch.compile argument\(s\) \['fulgraph'\]"),
        ({"backend": "no-such-backend"}, ValueError, "unknown torch.compile backend"),
        ({"mode": "fastest"}, ValueError, "unknown torch.compile mode"),
        ({"options": {"no_such_option": 1}}, ValueError, "unknown inductor option"),
        ({"options": [("max_autotune", True)]}, TypeError, "options must be a dict"),
        (
            {"mode": "max-autotune-no-cudagraphs", "options": {"max_autotune": True}},
            ValueError,
            "mode and options exclude each other",
        ),
        ({"backend": "eager", "options": {"max_autotune": True}}, ValueError, "inductor"),
    ],
)
def test_compile_refuses_bad_arguments_and_stays_usable(kwargs, error, match):
    loss, batch = make_setup("dqn", nested=False)
    with pytest.raises(error, match=match) as info:
        loss.compile(**kwargs)
    assert str(info.value).startswith("DQNLoss.compile: ")
    assert loss._compiled_call_impl is None  # nothing half-done: the loss still runs eagerly
    assert torch.isfinite(loss(batch)["loss"])
