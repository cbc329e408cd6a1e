"""PettingZoo benchmarks: a random-action rollout of ``simple_spread_v3`` (parallel API) through
``PettingZooWrapper`` beside a plain loop over the raw PettingZoo API.

Both sides run the same env (3 agents, ``max_cycles=HORIZON``) for ``STEPS`` steps with actions
drawn up front, reset it when the episode ends, and store the same entries: root and next
observations, actions, rewards, and the agents' and root done/terminated/truncated flags, as
``[T, n_agents, ...]`` (root flags ``[T, 1]``). The plain loop calls ``env.step`` with a dict of
actions and converts every agent's observation, reward and flags from numpy into preallocated
tensors. The ratio raw / tdrl (time) shows in one run::

    .venv/bin/python -m pytest benchmarks/test_pettingzoo.py --benchmark-enable -p no:doctest
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from tdrl.envs.libs import PettingZooWrapper

if not (pathlib.Path(__file__).parent / "conftest.py").exists():
    torch.set_num_threads(1)  # a shared conftest pins it for every family

simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")

STEPS = 200
HORIZON = 25
N_AGENTS = 3


def _bench(benchmark, fn, rounds: int = 30):
    # Many rounds of short runs: the minimum is the run least disturbed by other processes.
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def _make():
    return simple_spread_v3.parallel_env(N=N_AGENTS, max_cycles=HORIZON)


def _actions() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 5, (STEPS, N_AGENTS), generator=gen)


def raw_rollout(env, actions: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rollout as a PettingZoo user writes it: dicts in, preallocated tensors out."""
    agents = list(env.possible_agents)
    n = len(agents)
    obs_dim = env.observation_space(agents[0]).shape[0]
    out = {
        "obs": torch.empty(STEPS, n, obs_dim),
        "next_obs": torch.empty(STEPS, n, obs_dim),
        "action": actions.clone(),
        "reward": torch.empty(STEPS, n, 1),
    }
    for prefix in ("", "next_"):
        for flag in ("done", "terminated", "truncated"):
            out[prefix + flag] = torch.zeros(STEPS, n, 1, dtype=torch.bool)
            out[prefix + "root_" + flag] = torch.zeros(STEPS, 1, dtype=torch.bool)
    env.reset(seed=0)  # as PettingZooWrapper.set_seed(0): a seeded reset at once (TorchRL's)
    obs, _ = env.reset()
    current = torch.from_numpy(np.stack([obs[a] for a in agents]))
    rows = actions.tolist()
    flags = ("done", "terminated", "truncated", "root_done", "root_terminated", "root_truncated")
    for t in range(STEPS):
        out["obs"][t] = current
        if t and not out["next_root_done"][t - 1]:  # the flags the agents saw (false after a reset)
            for flag in flags:
                out[flag][t] = out["next_" + flag][t - 1]
        obs, rewards, terms, truncs, _ = env.step(dict(zip(agents, rows[t])))
        current = torch.from_numpy(np.stack([obs[a] for a in agents]))
        out["next_obs"][t] = current
        out["reward"][t] = torch.from_numpy(np.array([rewards[a] for a in agents], np.float32))[
            :, None
        ]
        term = torch.from_numpy(np.array([terms[a] for a in agents]))[:, None]
        trunc = torch.from_numpy(np.array([truncs[a] for a in agents]))[:, None]
        done = term | trunc
        out["next_terminated"][t], out["next_truncated"][t], out["next_done"][t] = term, trunc, done
        out["next_root_terminated"][t] = term.any()
        out["next_root_truncated"][t] = trunc.any()
        out["next_root_done"][t] = done.any()
        if done.any():
            obs, _ = env.reset()
            current = torch.from_numpy(np.stack([obs[a] for a in agents]))
    return out


def tdrl_rollout(env: PettingZooWrapper, actions: torch.Tensor):
    env.set_seed(0)
    return env.rollout(STEPS, actions=actions.unbind(0), break_when_any_done=False)


def test_outputs_agree():
    """Both sides produce the same data (checked once, outside the timings)."""
    actions = _actions()
    raw = raw_rollout(_make(), actions)
    data = tdrl_rollout(PettingZooWrapper(_make()), actions)
    assert torch.equal(data["agent", "observation"], raw["obs"])
    assert torch.equal(data["next", "agent", "observation"], raw["next_obs"])
    assert torch.equal(data["next", "agent", "reward"], raw["reward"])
    assert torch.equal(data["next", "agent", "done"], raw["next_done"])
    assert torch.equal(data["next", "done"], raw["next_root_done"])
    assert torch.equal(data["agent", "terminated"], raw["terminated"])
    assert torch.equal(data["truncated"], raw["root_truncated"])
    assert int(raw["next_root_done"].sum()) == STEPS // HORIZON


@pytest.mark.benchmark(group="pettingzoo-simple_spread-rollout")
def test_raw_rollout(benchmark):
    env, actions = _make(), _actions()
    _bench(benchmark, lambda: raw_rollout(env, actions))


@pytest.mark.benchmark(group="pettingzoo-simple_spread-rollout")
def test_tdrl_rollout(benchmark):
    env, actions = PettingZooWrapper(_make()), _actions()
    _bench(benchmark, lambda: tdrl_rollout(env, actions))
