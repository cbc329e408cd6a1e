"""VMAS benchmarks: a random-action rollout of ``navigation`` through ``VmasEnv`` beside a plain loop.

Both sides run the same VMAS env (4 agents, ``max_steps=HORIZON``) for ``STEPS`` steps with
actions drawn up front, store the same entries (root and next observations and infos, actions,
rewards, done flags, stacked per group as ``[num_envs, T, n_agents, ...]``) and reset the envs
that are done (one vectorised reset when all of them are, ``reset_at`` per env otherwise).
The ratio raw / tdrl (time) shows in one run::

    .venv/bin/python -m pytest benchmarks/test_vmas.py --benchmark-enable
"""

from __future__ import annotations

import pathlib

import pytest
import torch

if not (pathlib.Path(__file__).parent / "conftest.py").exists():
    torch.set_num_threads(1)  # a shared conftest pins it for every family

vmas = pytest.importorskip("vmas")

STEPS = 16
HORIZON = 8
SIZES = [1024, 4096]


def _bench(benchmark, fn, rounds: int = 8):
    # Many rounds of short runs: the minimum is the run least disturbed by other processes.
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def _actions(num_envs: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.rand((STEPS, num_envs, 4, 2), generator=gen).mul_(2.0).sub_(1.0)


def raw_rollout(env, actions: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rollout as a VMAS user writes it: per-agent lists in, group tensors out."""
    b, n = env.num_envs, env.n_agents
    obs_dim = env.observation_space[0].shape[0]
    info_keys = ("pos_rew", "final_rew", "agent_collisions")
    out = {
        "obs": torch.empty(b, STEPS, n, obs_dim),
        "next_obs": torch.empty(b, STEPS, n, obs_dim),
        "action": torch.empty(b, STEPS, n, 2),
        "reward": torch.empty(b, STEPS, n, 1),
        "done": torch.zeros(b, STEPS, 1, dtype=torch.bool),
        "next_done": torch.empty(b, STEPS, 1, dtype=torch.bool),
    }
    for key in info_keys:
        out[f"info_{key}"] = torch.empty(b, STEPS, n, 1)
        out[f"next_info_{key}"] = torch.empty(b, STEPS, n, 1)
    env.seed(0)
    obs, infos = env.reset(return_info=True)
    group_obs = torch.stack(obs, dim=1)
    group_info = {k: torch.stack([i[k] for i in infos], dim=1).unsqueeze(-1) for k in info_keys}
    for t in range(STEPS):
        action = actions[t]
        obs, rews, dones, infos = env.step(list(action.unbind(1)))
        out["obs"][:, t] = group_obs
        out["action"][:, t] = action
        group_obs = torch.stack(obs, dim=1)
        out["next_obs"][:, t] = group_obs
        out["reward"][:, t] = torch.stack(rews, dim=1).unsqueeze(-1)
        out["next_done"][:, t] = dones.unsqueeze(-1)
        for k in info_keys:
            out[f"info_{k}"][:, t] = group_info[k]
            group_info[k] = torch.stack([i[k] for i in infos], dim=1).unsqueeze(-1)
            out[f"next_info_{k}"][:, t] = group_info[k]
        if dones.all():
            obs, infos = env.reset(return_info=True)
        elif dones.any():
            for i in dones.nonzero().flatten().tolist():
                env.reset_at(i, return_observations=False)
            obs, infos = env.get_from_scenario(True, False, True, False)
        else:
            continue
        fresh = torch.stack(obs, dim=1)
        group_obs = torch.where(dones.view(b, 1, 1), fresh, group_obs)
        for k in info_keys:
            new = torch.stack([i[k] for i in infos], dim=1).unsqueeze(-1)
            group_info[k] = torch.where(dones.view(b, 1, 1), new, group_info[k])
    return out


def _make_raw(num_envs: int):
    return vmas.make_env("navigation", num_envs=num_envs, max_steps=HORIZON, seed=0)


def _tdrl_run(num_envs: int):
    from tdrl.envs.libs import VmasEnv

    env = VmasEnv("navigation", num_envs=num_envs, max_steps=HORIZON, seed=0)
    actions = _actions(num_envs)

    def run():
        step = iter(actions)
        env.set_seed(0)
        return env.rollout(
            STEPS, lambda td: td.set(("agents", "action"), next(step)), break_when_any_done=False
        )

    return run


def test_vmas_baseline_does_the_same_work():
    data = _tdrl_run(16)()
    raw = raw_rollout(_make_raw(16), _actions(16))
    pairs = {
        "obs": ("agents", "observation"),
        "next_obs": ("next", "agents", "observation"),
        "action": ("agents", "action"),
        "reward": ("next", "agents", "reward"),
        "done": "done",
        "next_done": ("next", "done"),
        "info_pos_rew": ("agents", "info", "pos_rew"),
        "next_info_agent_collisions": ("next", "agents", "info", "agent_collisions"),
    }
    for name, key in pairs.items():
        torch.testing.assert_close(data[key], raw[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("num_envs", SIZES)
def test_vmas_navigation_rollout_tdrl(benchmark, num_envs):
    benchmark.group = f"vmas navigation rollout {num_envs} envs"
    _bench(benchmark, _tdrl_run(num_envs))


@pytest.mark.parametrize("num_envs", SIZES)
def test_vmas_navigation_rollout_raw(benchmark, num_envs):
    benchmark.group = f"vmas navigation rollout {num_envs} envs"
    env = _make_raw(num_envs)
    actions = _actions(num_envs)
    _bench(benchmark, lambda: raw_rollout(env, actions))
