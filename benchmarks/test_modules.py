"""Module benchmarks: tdrl actors and recurrent modules beside plain PyTorch doing the same work.

Each group holds the tdrl version and a hand-written plain version ("raw"), so the ratio
raw / tdrl is visible in one run::

    .venv/bin/python -m pytest benchmarks/test_modules.py --benchmark-enable -p no:cacheprovider

(``-p no:doctest`` clashes with the ``--doctest-modules`` of the pytest addopts.) The LSTM group
also holds a single fused ``nn.LSTM`` call without resets: a lower bound, not the same work.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import (
    MLP,
    LSTMModule,
    NormalParamExtractor,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
)
from tdrl.specs import Bounded, Categorical

torch.set_num_threads(1)

BATCH, OBS, ACT, N_ACTIONS = 256, 17, 6, 6
SEQ_B, SEQ_T, SEQ_IN, SEQ_H = 32, 64, 16, 64


def _obs_td() -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    return TensorDict(observation=torch.randn(BATCH, OBS, generator=gen), batch_size=[BATCH])


# ----------------------------------------------------------------- ProbabilisticActor
def _tanh_normal_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(MLP(OBS, 2 * ACT, num_cells=256, depth=2), NormalParamExtractor())


@pytest.mark.benchmark(group="probabilistic_actor_tanh_normal_256")
def test_probabilistic_actor_tdrl(benchmark) -> None:
    net = _tanh_normal_net()
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ["loc", "scale"],
        distribution_class=TanhNormal,
        spec=Bounded(-1.0, 1.0, shape=(ACT,)),
        return_log_prob=True,
    )
    td = _obs_td()
    with torch.no_grad():
        benchmark(actor, td)


@pytest.mark.benchmark(group="probabilistic_actor_tanh_normal_256")
def test_probabilistic_actor_raw(benchmark) -> None:
    net = _tanh_normal_net()
    obs = _obs_td()["observation"]

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale = net(obs)
        return TanhNormal(loc, scale, low=-1.0, high=1.0).rsample_and_log_prob()

    with torch.no_grad():
        benchmark(run)


# ----------------------------------------------------------------- QValueActor
def _q_net() -> nn.Module:
    torch.manual_seed(0)
    return MLP(OBS, N_ACTIONS, num_cells=256, depth=2)


@pytest.mark.benchmark(group="qvalue_actor_256")
def test_qvalue_actor_tdrl(benchmark) -> None:
    actor = QValueActor(_q_net(), spec=Categorical(N_ACTIONS))
    td = _obs_td()
    with torch.no_grad():
        benchmark(actor, td)


@pytest.mark.benchmark(group="qvalue_actor_256")
def test_qvalue_actor_raw(benchmark) -> None:
    net = _q_net()
    obs = _obs_td()["observation"]

    def run() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        values = net(obs)
        index = values.argmax(-1, keepdim=True)
        return index.squeeze(-1), values, values.gather(-1, index)

    with torch.no_grad():
        benchmark(run)


# ----------------------------------------------------------------- LSTM sequence mode
def _seq_data(reset_prob: float) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    shape = (SEQ_B, SEQ_T)
    is_init = torch.rand(*shape, 1, generator=gen) < reset_prob
    is_init[:, 0] = True
    return TensorDict(
        embed=torch.randn(*shape, SEQ_IN, generator=gen),
        recurrent_state_h=torch.zeros(*shape, 1, SEQ_H),
        recurrent_state_c=torch.zeros(*shape, 1, SEQ_H),
        is_init=is_init,
        batch_size=shape,
    )


def _lstm_module() -> LSTMModule:
    torch.manual_seed(0)
    module = LSTMModule(SEQ_IN, SEQ_H, in_key="embed", out_key="features")
    return module.set_recurrent_mode(True)


def plain_lstm_loop(lstm: nn.LSTM, x, h, c, is_init):
    """One nn.LSTM call per step, zeroing the states at resets; keeps every output and state."""
    keep = (~is_init).to(x.dtype).transpose(0, 1)[:, None, :, None]  # [T, 1, B, 1]
    outs, hs, cs = [], [], []
    for t in range(x.shape[1]):
        h, c = h * keep[t], c * keep[t]
        y, (h, c) = lstm(x[:, t : t + 1], (h, c))
        outs.append(y)
        hs.append(h)
        cs.append(c)
    return torch.cat(outs, 1), torch.stack(hs, 2), torch.stack(cs, 2)


@pytest.mark.benchmark(group="lstm_sequence_32x64_resets")
@pytest.mark.parametrize("reset_prob", [0.0, 0.02])
def test_lstm_sequence_tdrl(benchmark, reset_prob) -> None:
    module = _lstm_module()
    td = _seq_data(reset_prob)
    with torch.no_grad():
        benchmark(module, td)


@pytest.mark.benchmark(group="lstm_sequence_32x64_resets")
def test_lstm_sequence_raw_loop(benchmark) -> None:
    lstm = _lstm_module().layers[0]
    td = _seq_data(0.02)
    x, is_init = td["embed"], td["is_init"].squeeze(-1)
    h0 = torch.zeros(1, SEQ_B, SEQ_H)
    with torch.no_grad():
        benchmark(plain_lstm_loop, lstm, x, h0, h0.clone(), is_init)


@pytest.mark.benchmark(group="lstm_sequence_32x64_resets")
def test_lstm_sequence_raw_fused_no_resets(benchmark) -> None:
    """Lower bound, not the same work: one fused call, no resets, last states only."""
    lstm = _lstm_module().layers[0]
    x = _seq_data(0.0)["embed"]
    h0 = torch.zeros(1, SEQ_B, SEQ_H)
    with torch.no_grad():
        benchmark(lstm, x, (h0, h0.clone()))


# ----------------------------------------------------------------- LSTM step mode
@pytest.mark.benchmark(group="lstm_step_32")
def test_lstm_step_tdrl(benchmark) -> None:
    module = _lstm_module().set_recurrent_mode(False)
    td = _seq_data(0.02)[:, 0]
    with torch.no_grad():
        benchmark(module, td)


@pytest.mark.benchmark(group="lstm_step_32")
def test_lstm_step_raw(benchmark) -> None:
    lstm = _lstm_module().layers[0]
    td = _seq_data(0.02)[:, 0]
    x, is_init = td["embed"], td["is_init"]
    h, c = td["recurrent_state_h"], td["recurrent_state_c"]

    def run():
        keep = (~is_init).to(x.dtype).unsqueeze(-1)
        h0 = (h * keep).transpose(0, 1).contiguous()
        c0 = (c * keep).transpose(0, 1).contiguous()
        y, (h1, c1) = lstm(x.unsqueeze(1), (h0, c0))
        return y.squeeze(1), h1.transpose(0, 1), c1.transpose(0, 1)

    with torch.no_grad():
        benchmark(run)
