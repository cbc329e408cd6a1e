"""Tests of LSTMModule / GRUModule: step mode, sequence mode (== step loop), errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from tdrl.envs.transforms import InitTracker, TensorDictPrimer, TransformedEnv
from tdrl.modules import GRUModule, LSTMModule, RecurrentModuleBase, set_recurrent_mode
from tdrl.testing import CountingEnv

LEADS = [(), (2, 3)]
T, F_IN, H = 7, 3, 5


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _make(kind: str, num_layers: int = 1, nested: bool = False) -> RecurrentModuleBase:
    if nested:
        keys = {"in_key": ("agents", "x"), "out_key": ("agents", "y")}
        if kind == "lstm":
            return LSTMModule(
                F_IN,
                H,
                num_layers=num_layers,
                state_keys=(("agents", "h"), ("agents", "c")),
                **keys,
            )
        return GRUModule(F_IN, H, num_layers=num_layers, state_key=("agents", "h"), **keys)
    cls = LSTMModule if kind == "lstm" else GRUModule
    return cls(F_IN, H, num_layers=num_layers, in_key="x", out_key="y")


def _data(module: RecurrentModuleBase, lead: tuple[int, ...], resets: str) -> TensorDictBase:
    batch = (*lead, T)
    td = TensorDict(batch_size=batch)
    td.set(module.in_key, torch.randn(*batch, F_IN))
    for key in module.state_keys:  # random states: only t = 0 (and resets) may be read
        td.set(key, torch.randn(*batch, module.num_layers, H))
    if resets != "none":
        is_init = torch.zeros(*batch, 1, dtype=torch.bool)
        if resets == "mid":
            is_init = torch.rand(*batch, 1) < 0.3
            is_init[..., 3, :] = True
        is_init[..., 0, :] = resets == "mid"
        td.set(module.is_init_key, is_init)
    return td


def _step_loop(module: RecurrentModuleBase, td: TensorDictBase) -> TensorDictBase:
    """Reference: step mode one time step at a time, carrying the states by hand."""
    outs = []
    carried = {k: td.get(k)[..., 0, :, :] for k in module.state_keys}
    for t in range(td.batch_size[-1]):
        step = td[..., t].clone()
        for key, value in carried.items():
            step.set(key, value)
        step = module.set_recurrent_mode(False)(step)
        carried = {k: step.get(("next", *((k,) if isinstance(k, str) else k))) for k in carried}
        outs.append(step)
    return torch.stack(outs, -1)


def _next(key):
    return ("next", key) if isinstance(key, str) else ("next", *key)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("resets", ["none", "start_false", "mid"])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_sequence_equals_step_loop(kind, lead, resets, num_layers) -> None:
    module = _make(kind, num_layers)
    td = _data(module, lead, resets)
    expected = _step_loop(module, td)
    with set_recurrent_mode(module):
        got = module(td.clone())
    torch.testing.assert_close(
        got.get(module.out_key), expected.get(module.out_key), atol=1e-5, rtol=1e-5
    )
    for key in module.state_keys:
        torch.testing.assert_close(
            got.get(_next(key)), expected.get(_next(key)), atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_nested_keys_sequence_and_step(kind) -> None:
    module = _make(kind, 2, nested=True)
    td = _data(module, (2,), "mid")
    expected = _step_loop(module, td)
    got = module.set_recurrent_mode(True)(td.clone())
    torch.testing.assert_close(got["agents", "y"], expected["agents", "y"], atol=1e-5, rtol=1e-5)
    assert got["next", "agents", "h"].shape == (2, T, 2, H)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gradients_match_step_loop(kind) -> None:
    module = _make(kind, 2)
    td = _data(module, (3,), "mid")

    def grads(out: TensorDictBase) -> list[torch.Tensor]:
        module.zero_grad()
        loss = out.get("y").square().sum() + out.get(_next(module.state_keys[-1])).sum()
        loss.backward()
        return [p.grad.clone() for p in module.parameters()]

    expected = grads(_step_loop(module, td))
    got = grads(module.set_recurrent_mode(True)(td.clone()))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("lead", LEADS)
def test_step_mode_resets_where_is_init(kind, lead) -> None:
    module = _make(kind)
    td = _data(module, lead, "none")[..., 0]
    is_init = torch.zeros(*lead, 1, dtype=torch.bool)
    if lead:
        is_init[0, 1] = True
    else:
        is_init[...] = True
    out = module(td.clone().set("is_init", is_init))
    zeroed = td.clone()
    for key in module.state_keys:
        zeroed.set(key, torch.zeros_like(td.get(key)))
    fresh, kept = module(zeroed)["y"], module(td.clone())["y"]
    expected = torch.where(is_init, fresh, kept)
    torch.testing.assert_close(out["y"], expected)
    assert out["y"].shape == (*lead, H)
    assert out[_next(module.state_keys[0])].shape == (*lead, 1, H)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("mode", [False, True])
def test_missing_state_names_primer(kind, mode) -> None:
    module = _make(kind).set_recurrent_mode(mode)
    td = TensorDict(x=torch.randn(4, F_IN), batch_size=[4])
    with pytest.raises(KeyError, match=r"recurrent_state.*is missing.*'x'.*make_tensordict_primer"):
        module(td)


def test_missing_state_in_env_rollout() -> None:
    env = CountingEnv(batch_size=(2,), max_steps=100)
    lstm = LSTMModule(1, 4, in_key="observation", out_key="features")
    policy = TensorDictSequential(lstm, TensorDictModule(nn.Linear(4, 1), ["features"], ["action"]))
    with pytest.raises(KeyError, match=r"env\.append_transform"):
        env.rollout(3, policy)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_env_rollout_with_primer_then_sequence_replay(kind) -> None:
    """Collect with resets mid-rollout, then replay in sequence mode: same features."""
    env = TransformedEnv(CountingEnv(batch_size=(2,), max_steps=3), InitTracker())
    cls = LSTMModule if kind == "lstm" else GRUModule
    rnn = cls(1, 4, in_key="observation", out_key="features", num_layers=2)
    env.append_transform(rnn.make_tensordict_primer())
    head = TensorDictModule(nn.Sequential(nn.Linear(4, 1), nn.Sigmoid()), ["features"], ["action"])
    policy = TensorDictSequential(rnn, head)
    with torch.no_grad():
        rollout = env.rollout(8, policy, break_when_any_done=False)
        assert bool(rollout["is_init"][:, 3].all())  # an episode starts mid-rollout
        key = rnn.state_keys[-1]
        carried = rollout[key][:, 1:]
        torch.testing.assert_close(
            torch.where(rollout["is_init"][:, 1:, None], 0.0, rollout["next", key][:, :-1]),
            carried,
        )
        with set_recurrent_mode(policy):
            replay = policy(rollout.clone())
    torch.testing.assert_close(replay["features"], rollout["features"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(replay["next", key], rollout["next", key], atol=1e-5, rtol=1e-5)


def test_recurrent_mode_switches() -> None:
    module = _make("lstm")
    assert module.set_recurrent_mode() is module and module.recurrent_mode
    with set_recurrent_mode(TensorDictSequential(module), False):
        assert not module.recurrent_mode
    assert module.recurrent_mode


def test_sequence_mode_needs_time_dim() -> None:
    module = _make("gru").set_recurrent_mode(True)
    td = TensorDict(x=torch.randn(F_IN), recurrent_state=torch.zeros(1, H), batch_size=[])
    with pytest.raises(ValueError, match="needs a time dim"):
        module(td)


def test_state_spec_and_primer() -> None:
    module = _make("lstm", 3)
    spec = module.recurrent_state_spec()
    zero = spec.zero((4,))
    assert zero["recurrent_state_h"].shape == zero["recurrent_state_c"].shape == (4, 3, H)
    primer = module.make_tensordict_primer()
    assert isinstance(primer, TensorDictPrimer)
    filled = primer(TensorDict(batch_size=[2, 5]))
    assert filled["recurrent_state_c"].shape == (2, 5, 3, H)
    assert not filled["recurrent_state_c"].any()


def test_dropout_only_in_training() -> None:
    module = LSTMModule(F_IN, H, in_key="x", out_key="y", num_layers=2, dropout=0.5)
    td = _data(module, (4,), "none")[..., 0]
    module.eval()
    torch.testing.assert_close(module(td.clone())["y"], module(td.clone())["y"])
    module.train()
    assert not torch.equal(module(td.clone())["y"], module(td.clone())["y"])


# ----------------------------------------------------------------- TorchRL's arguments


def test_torchrl_positional_order() -> None:
    # LSTMModule(input_size, hidden_size, num_layers, bias, batch_first, dropout, ...)
    lstm = LSTMModule(F_IN, H, 2, False, True, 0.25, in_key="x", out_key="y")
    assert lstm.num_layers == 2 and lstm.dropout == 0.25
    assert not any("bias" in name for name, _ in lstm.named_parameters())
    gru = GRUModule(F_IN, H, 3, True, True, 0.0, in_key="x", out_key="y")
    assert gru.num_layers == 3 and gru.recurrent_state_spec()["recurrent_state"].shape == (3, H)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_in_keys_out_keys_triplets(kind) -> None:
    n = 2 if kind == "lstm" else 1
    states = ["h", "c"][:n]
    in_keys = ["x", *states, "start"]
    out_keys = ["y", *[("next", f"{s}_new") for s in states]]
    cls = LSTMModule if kind == "lstm" else GRUModule
    module = cls(F_IN, H, in_keys=in_keys, out_keys=out_keys)
    assert module.in_keys == in_keys and module.out_keys == out_keys
    td = TensorDict(
        x=torch.randn(4, F_IN), start=torch.ones(4, 1, dtype=torch.bool), batch_size=[4]
    )
    for s in states:
        td[s] = torch.randn(4, 1, H)
    out = module(td)
    # "start" is the episode-start key: the random states are zeroed, as with zero states
    fresh = cls(F_IN, H, in_key="x", out_key="y")
    fresh.load_state_dict(module.state_dict())
    ref = td.select("x").update(fresh.recurrent_state_spec().zero((4,)))
    torch.testing.assert_close(out["y"], fresh(ref)["y"])
    for s in states:
        assert out["next", f"{s}_new"].shape == (4, 1, H)
    # in_keys without the episode-start key: TorchRL's "is_init"
    assert cls(F_IN, H, in_keys=in_keys[:-1], out_keys=out_keys).in_keys[-1] == "is_init"


def _manual_lstm(lstm: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """Reference LSTM from the gate equations with lstm's weights (zero initial states)."""
    outs = []
    for layer in range(lstm.num_layers):
        w_ih, w_hh = getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"weight_hh_l{layer}")
        b = getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
        h = c = x.new_zeros(x.shape[0], lstm.hidden_size)
        outs = []
        for t in range(x.shape[1]):
            i, f, g, o = (x[:, t] @ w_ih.T + h @ w_hh.T + b).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        x = torch.stack(outs, 1)
    return x


def test_wraps_an_lstm_instance_and_shares_its_parameters() -> None:
    base = nn.LSTM(F_IN, H, num_layers=2, batch_first=True)
    module = LSTMModule(lstm=base, in_key="x", out_key="y").set_recurrent_mode(True)
    assert (module.input_size, module.hidden_size, module.num_layers) == (F_IN, H, 2)
    td = TensorDict(x=torch.randn(3, T, F_IN), batch_size=[3, T])
    td.update(module.recurrent_state_spec().zero((3, T)))
    out = module(td)["y"]
    torch.testing.assert_close(out, _manual_lstm(base, td["x"]), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert base.weight_hh_l1.grad is not None and base.weight_ih_l0.grad is not None
    with torch.no_grad():
        base.weight_ih_l0.zero_()  # the module reads the instance's tensors, not copies
    assert torch.equal(module.layers[0].weight_ih_l0, base.weight_ih_l0)


def test_wraps_a_gru_instance() -> None:
    base = nn.GRU(F_IN, H, batch_first=True)
    module = GRUModule(gru=base, in_key="x", out_key="y")
    td = TensorDict(x=torch.randn(4, F_IN), recurrent_state=torch.zeros(4, 1, H), batch_size=[4])
    expected, _ = base(td["x"].unsqueeze(1))
    torch.testing.assert_close(module(td)["y"], expected.squeeze(1))
    assert module.layers[0].weight_hh_l0 is base.weight_hh_l0


def test_default_recurrent_mode() -> None:
    module = GRUModule(F_IN, H, in_key="x", out_key="y", default_recurrent_mode=True)
    assert module.recurrent_mode is True
    td = TensorDict(x=torch.randn(2, T, F_IN), batch_size=[2, T])
    td.update(module.recurrent_state_spec().zero((2, T)))
    assert module(td)["y"].shape == (2, T, H)
    with set_recurrent_mode(False):
        assert module.recurrent_mode is False
    assert LSTMModule(F_IN, H, in_key="x", out_key="y").recurrent_mode is False
    assert LSTMModule(F_IN, H, recurrent_backend="auto", in_key="x", out_key="y")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"in_key": "x", "in_keys": ["x", "h", "c"], "out_key": "y"}, ValueError, "exactly one"),
        ({"out_key": "y"}, ValueError, "exactly one of in_key and in_keys"),
        ({"in_key": "x"}, ValueError, "exactly one of out_key and out_keys"),
        ({"in_keys": ["x", "h"], "out_key": "y"}, ValueError, "in_keys must be"),
        ({"in_key": "x", "out_keys": ["y"]}, ValueError, "out_keys must be"),
        (
            {"in_keys": ["x", "h", "c"], "state_keys": ("a", "b"), "out_key": "y"},
            ValueError,
            "in_keys already",
        ),
        ({"batch_first": False}, ValueError, "batch_first must be True"),
        ({"proj_size": 2}, NotImplementedError, "proj_size=2"),
        ({"bidirectional": True}, NotImplementedError, "bidirectional=True"),
        ({"python_based": True}, NotImplementedError, "python_based=True"),
        ({"recurrent_backend": "scan"}, NotImplementedError, "recurrent_backend='scan'"),
        ({"recurrent_backend": "fast"}, ValueError, "unknown recurrent_backend"),
        ({"recurrent_compute_dtype": torch.bfloat16}, NotImplementedError, "compute_dtype"),
        ({"recurrent_recompute": "full"}, NotImplementedError, "recurrent_recompute='full'"),
        ({"recurrent_matmul_precision": "tf32"}, NotImplementedError, "precision='tf32'"),
    ],
)
def test_argument_errors(kwargs, error, match) -> None:
    keys = (
        {}
        if {"in_key", "in_keys", "out_key", "out_keys"} & set(kwargs)
        else {
            "in_key": "x",
            "out_key": "y",
        }
    )
    with pytest.raises(error, match=match):
        LSTMModule(F_IN, H, **{**keys, **kwargs})


def test_instance_errors() -> None:
    keys = {"in_key": "x", "out_key": "y"}
    with pytest.raises(ValueError, match="input_size and hidden_size are required"):
        LSTMModule(**keys)
    with pytest.raises(ValueError, match="cannot be passed with input_size"):
        LSTMModule(F_IN, H, lstm=nn.LSTM(F_IN, H, batch_first=True), **keys)
    with pytest.raises(ValueError, match="batch_first must be True"):
        LSTMModule(lstm=nn.LSTM(F_IN, H), **keys)
    with pytest.raises(NotImplementedError, match="bidirectional"):
        GRUModule(gru=nn.GRU(F_IN, H, batch_first=True, bidirectional=True), **keys)
    with pytest.raises(NotImplementedError, match="proj_size"):
        LSTMModule(lstm=nn.LSTM(F_IN, H, batch_first=True, proj_size=2), **keys)
    with pytest.raises(TypeError, match=r"must be an nn\.GRU"):
        GRUModule(gru=nn.LSTM(F_IN, H, batch_first=True), **keys)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_layers differs"):
        LSTMModule(num_layers=3, lstm=nn.LSTM(F_IN, H, batch_first=True), **keys)
