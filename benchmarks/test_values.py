"""Value estimation benchmarks: tdrl functional/estimators beside hand-written plain PyTorch.

Each group holds the tdrl version and a plain version of the same computation ("raw"), so the
ratio tdrl / raw is visible in one run::

    .venv/bin/python -m pytest benchmarks/test_values.py --benchmark-enable -p no:doctest
"""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.objectives.value import GAE, TD0Estimator
from tdrl.objectives.value import _reference as ref
from tdrl.objectives.value import functional as F

if not (pathlib.Path(__file__).parent / "conftest.py").exists():
    torch.set_num_threads(1)  # a shared conftest would pin it for every family

GAMMA, LMBDA = 0.99, 0.95
SHAPES = [(1, 512), (32, 512)]


def make_data(batch, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, steps, 1)
    terminated = torch.rand(shape, generator=gen) < 0.01
    done = terminated | (torch.rand(shape, generator=gen) < 0.01)
    return {
        "state_value": torch.randn(shape, generator=gen),
        "next_state_value": torch.randn(shape, generator=gen),
        "reward": torch.randn(shape, generator=gen),
        "done": done,
        "terminated": terminated,
    }


# ----------------------------------------------------------------- plain PyTorch baselines
def plain_reverse_sum(x, a, cut):
    """y_t = x_t + a * (1 - cut_t) * y_{t+1} along dim -2: weighted reverse cumsum in float64."""
    steps = x.shape[-2]
    log_w = torch.arange(steps, dtype=torch.float64) * math.log(a)
    w = log_w.exp().unsqueeze(-1)
    s = (x.double() * w).flip(-2).cumsum(-2)  # s[j] = sum of the last j + 1 weighted terms
    pos = torch.arange(steps).unsqueeze(-1)
    seg_start = torch.where(cut.flip(-2), pos, 0).cummax(-2).values
    before = torch.cat([torch.zeros_like(s[..., :1, :]), s], -2).gather(-2, seg_start)
    return ((s - before).flip(-2) / w).to(x.dtype)


def plain_gae(gamma, lmbda, value, next_value, reward, done, terminated):
    delta = reward + gamma * next_value * (~terminated) - value
    advantage = plain_reverse_sum(delta, gamma * lmbda, done | terminated)
    return advantage, advantage + value


def plain_gae_loop(gamma, lmbda, value, next_value, reward, done, terminated):
    not_term, not_done = (~terminated).float(), (~done).float()
    delta = reward + gamma * next_value * not_term - value
    advantage = torch.empty_like(delta)
    running = torch.zeros_like(delta[:, 0])
    for t in range(delta.shape[1] - 1, -1, -1):
        running = delta[:, t] + gamma * lmbda * not_done[:, t] * running
        advantage[:, t] = running
    return advantage, advantage + value


def plain_td_lambda(gamma, lmbda, next_value, reward, done, terminated):
    cut = done | terminated
    cut[:, -1] = True
    keep = torch.where(cut, 1.0, 1.0 - lmbda)
    x = reward + gamma * next_value * keep * (~terminated)
    return plain_reverse_sum(x, gamma * lmbda, cut)


def plain_td_lambda_loop(gamma, lmbda, next_value, reward, done, terminated):
    not_term, not_done = (~terminated).float(), (~(done | terminated)).float()
    not_done[:, -1] = 0.0
    out = torch.empty_like(reward)
    running = torch.zeros_like(reward[:, 0])
    for t in range(reward.shape[1] - 1, -1, -1):
        mixed = next_value[:, t] + not_done[:, t] * lmbda * (running - next_value[:, t])
        running = reward[:, t] + gamma * not_term[:, t] * mixed
        out[:, t] = running
    return out


def plain_td0(gamma, next_value, reward, terminated):
    return reward + gamma * next_value * (~terminated)


# ----------------------------------------------------------------- functional
def _run(benchmark, group, fn, *args):
    benchmark.group = group
    benchmark(fn, *args)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("impl", ["tdrl", "raw", "tdrl-loop", "raw-loop"])
def test_gae(benchmark, shape, impl):
    d = make_data(*shape)
    fn = {
        "tdrl": F.generalized_advantage_estimate,
        "raw": plain_gae,
        "tdrl-loop": ref.generalized_advantage_estimate_loop,
        "raw-loop": plain_gae_loop,
    }[impl]
    args = (d["state_value"], d["next_state_value"], d["reward"], d["done"], d["terminated"])
    group = f"gae {shape}" + (" loop" if "loop" in impl else "")
    _run(benchmark, group, fn, GAMMA, LMBDA, *args)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("impl", ["tdrl", "raw", "tdrl-loop", "raw-loop"])
def test_td_lambda(benchmark, shape, impl):
    d = make_data(*shape)
    fn = {
        "tdrl": F.td_lambda_return_estimate,
        "raw": plain_td_lambda,
        "tdrl-loop": ref.td_lambda_return_estimate_loop,
        "raw-loop": plain_td_lambda_loop,
    }[impl]
    args = (d["next_state_value"], d["reward"], d["done"], d["terminated"])
    group = f"td_lambda {shape}" + (" loop" if "loop" in impl else "")
    _run(benchmark, group, fn, GAMMA, LMBDA, *args)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("impl", ["tdrl", "raw", "tdrl-loop", "raw-loop"])
def test_td1(benchmark, shape, impl):
    d = make_data(*shape)
    args = (d["next_state_value"], d["reward"], d["done"], d["terminated"])
    group = f"td1 {shape}" + (" loop" if "loop" in impl else "")
    if impl in ("tdrl", "tdrl-loop"):
        fn = F.td1_return_estimate if impl == "tdrl" else ref.td1_return_estimate_loop
        _run(benchmark, group, fn, GAMMA, *args)
    else:  # TD(1) is TD(lambda = 1)
        fn = plain_td_lambda if impl == "raw" else plain_td_lambda_loop
        _run(benchmark, group, fn, GAMMA, 1.0, *args)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("impl", ["tdrl", "raw"])
def test_td0(benchmark, shape, impl):
    d = make_data(*shape)
    fn = F.td0_return_estimate if impl == "tdrl" else plain_td0
    _run(benchmark, f"td0 {shape}", fn, GAMMA, d["next_state_value"], d["reward"], d["terminated"])


# The TD(0) estimator as losses call it (``est._estimate`` on tensors: target and advantage).
@pytest.mark.parametrize("impl", ["tdrl", "raw"])
def test_td0_estimator(benchmark, impl):
    d = make_data(32, 512)
    value, next_value, reward = d["state_value"], d["next_state_value"], d["reward"]
    done, terminated = d["done"], d["terminated"]
    if impl == "tdrl":
        est = TD0Estimator(gamma=GAMMA)

        def run():
            return est._estimate(value, next_value, reward, done, terminated, time_dim=1)
    else:

        def run():
            target = plain_td0(GAMMA, next_value, reward, terminated)
            return target - value, target

    benchmark.group = "td0 estimator (32, 512)"
    benchmark(run)


# ----------------------------------------------------------------- GAE module
def make_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 1),
    )


def make_rollout(batch=32, steps=512):
    d = make_data(batch, steps)
    gen = torch.Generator().manual_seed(1)
    return TensorDict(
        {
            "observation": torch.randn(batch, steps, 4, generator=gen),
            "next": {
                "observation": torch.randn(batch, steps, 4, generator=gen),
                "reward": d["reward"],
                "done": d["done"],
                "terminated": d["terminated"],
            },
        },
        batch_size=[batch, steps],
    )


def test_gae_module(benchmark):
    critic = TensorDictModule(make_mlp(), in_keys=["observation"], out_keys=["state_value"])
    gae = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
    td = make_rollout()
    benchmark.group = "gae module (32, 512) mlp"
    benchmark(gae, td)


def test_gae_module_raw(benchmark):
    mlp = make_mlp()
    td = make_rollout()
    obs, nxt = td["observation"], td["next"]

    def raw():
        with torch.no_grad():
            values = mlp(torch.stack([obs, nxt["observation"]]))
            value, next_value = values.unbind(0)
            adv, target = plain_gae(
                GAMMA, LMBDA, value, next_value, nxt["reward"], nxt["done"], nxt["terminated"]
            )
        return value, next_value, adv, target

    benchmark.group = "gae module (32, 512) mlp"
    benchmark(raw)
