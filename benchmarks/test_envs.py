"""Env benchmarks: built-in and gymnasium rollouts, step_mdp, each beside a plain baseline.

Each group holds the tdrl version and a hand-written version of the same work ("raw"), so the
ratio raw / tdrl (time) is visible in one run::

    .venv/bin/python -m pytest benchmarks/test_envs.py --benchmark-enable -p no:doctest

Rollouts take ``STEPS`` steps without stopping at done (done members are reset), with random
actions drawn up front so that both sides spend the same time on them; both store the same
entries (root observation, action and done flags, next observation, reward and done flags) and
stack them at the end. Steps/s = ``STEPS * batch / mean``.
"""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.builtin import CartPoleEnv, MultiAgentNavigationEnv
from tdrl.envs.core import step_mdp

if not (pathlib.Path(__file__).parent / "conftest.py").exists():
    torch.set_num_threads(1)  # a shared conftest pins it for every family

STEPS = 200


def _bench(benchmark, fn, rounds: int = 20):
    # Many rounds of short runs: the minimum is the run least disturbed by other processes.
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


# ----------------------------------------------------------------- built-in CartPole
def _action_table(batch: tuple[int, ...]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    index = torch.randint(0, 2, (STEPS, *batch), generator=gen)
    return torch.nn.functional.one_hot(index, 2)  # int64, as CartPoleEnv's OneHot spec


def raw_cartpole_rollout(batch: tuple[int, ...], actions: torch.Tensor) -> dict:
    """The CartPole-v1 dynamics in a plain loop, resetting done members, storing every entry.

    The dynamics use the same fused ops as ``CartPoleEnv`` so that the ratio measures what the
    env machinery costs, not a difference in arithmetic.
    """
    gen = torch.Generator().manual_seed(0)
    state = torch.rand((*batch, 4), generator=gen) * 0.1 - 0.05
    steps = torch.zeros((*batch, 1), dtype=torch.int64)
    done = torch.zeros((*batch, 1), dtype=torch.bool)
    theta_limit = 12 * 2 * math.pi / 360
    keys = ("obs", "act", "done", "term", "trunc", "nobs", "rew", "ndone", "nterm", "ntrunc")
    out: dict[str, list] = {k: [] for k in keys}
    limits = torch.tensor([2.4, math.inf, theta_limit, math.inf])
    for t in range(STEPS):
        action = actions[t]
        force = torch.where(action[..., 1:2].bool(), 10.0, -10.0)
        x_dot, theta, theta_dot = state[..., 1:2], state[..., 2:3], state[..., 3:4]
        cos, sin = theta.cos(), theta.sin()
        temp = torch.addcmul(force, theta_dot.square(), sin, value=0.05).div_(1.1)
        denom = cos.square().mul_(-0.1 / 1.1).add_(4.0 / 3.0).mul_(0.5)
        theta_acc = torch.addcmul(sin.mul_(9.8), cos, temp, value=-1.0).div_(denom)
        x_acc = torch.addcmul(temp, theta_acc, cos, value=-0.05 / 1.1)
        new = torch.add(state, torch.cat((x_dot, x_acc, theta_dot, theta_acc), dim=-1), alpha=0.02)
        term = (new.abs() > limits).any(-1, keepdim=True)
        steps = steps + 1
        trunc = steps >= 500
        new_done = term | trunc
        reward = torch.ones_like(term, dtype=torch.float32)
        values = (state, action, done, done, done, new, reward, new_done, term, trunc)
        for key, value in zip(keys, values):
            out[key].append(value)
        state = new
        if new_done.any():
            fresh = torch.rand((*batch, 4), generator=gen) * 0.1 - 0.05
            state = torch.where(new_done, fresh, new)
            steps = torch.where(new_done, 0, steps)
        done = torch.zeros_like(new_done)
    return {k: torch.stack(v, dim=len(batch)) for k, v in out.items()}


def _tdrl_cartpole(batch: tuple[int, ...]):
    env = CartPoleEnv(batch_size=batch)
    actions = _action_table(batch)

    def run():
        step = iter(actions)
        return env.rollout(
            STEPS, lambda td: td.set("action", next(step)), break_when_any_done=False
        )

    return run


@pytest.mark.parametrize("batch", [(), (1024,)], ids=["b1", "b1024"])
def test_cartpole_rollout_tdrl(benchmark, batch):
    benchmark.group = f"cartpole rollout {batch or 1}"
    _bench(benchmark, _tdrl_cartpole(batch), rounds=10 if batch else 30)


@pytest.mark.parametrize("batch", [(), (1024,)], ids=["b1", "b1024"])
def test_cartpole_rollout_raw(benchmark, batch):
    benchmark.group = f"cartpole rollout {batch or 1}"
    actions = _action_table(batch)
    _bench(benchmark, lambda: raw_cartpole_rollout(batch, actions), rounds=10 if batch else 30)


# ----------------------------------------------------------------- gymnasium CartPole
# Three tdrl rollouts of GymEnv("CartPole-v1") (STEPS steps, done envs reset, actions replayed
# from a table): the default one-hot actions ("tdrl") and categorical ones ("tdrl_categorical").
# Two baselines: "plain", the plain loop doing the same work as the tdrl rollout
# (gymnasium step, numpy->torch conversion into a preallocated output holding every entry the
# tdrl rollout returns, a reset at the start and after each done), and the older "raw" loop
# (observations converted per step, the rest stacked at the end, no reset at the start).
def _gym_rollout(categorical: bool):
    from tdrl.envs.libs import GymEnv

    env = GymEnv("CartPole-v1", categorical_action_encoding=categorical)
    env.set_seed(0)
    actions = _action_table(()).long()  # GymEnv's one-hot actions are int64, as in TorchRL
    if categorical:
        actions = actions.argmax(-1)

    def run():
        step = iter(actions)
        return env.rollout(
            STEPS, lambda td: td.set("action", next(step)), break_when_any_done=False
        )

    return env, run


@pytest.mark.parametrize("encoding", ["one_hot", "categorical"])
def test_gym_cartpole_rollout_tdrl(benchmark, encoding):
    benchmark.group = "gymnasium CartPole-v1 rollout"
    _, run = _gym_rollout(encoding == "categorical")
    _bench(benchmark, run, rounds=50)


def plain_gym_rollout(env, actions: list[int], seed: int | None = None) -> dict[str, torch.Tensor]:
    """The issue's plain loop: every entry of the tdrl rollout in preallocated tensors.

    Root and next observations, the action index, the reward and the next done flags are
    written each step through numpy views of the output tensors (gymnasium returns numpy
    arrays and python scalars: numpy writes are the cheapest conversion into torch memory).
    The root done flags stay False (every step starts from a live env), as in tdrl's rollout.
    """
    obs_dim = env.observation_space.shape[0]
    out = {
        "observation": torch.empty(STEPS, obs_dim),
        "action": torch.empty(STEPS, dtype=torch.int64),
        "next_observation": torch.empty(STEPS, obs_dim),
        "reward": torch.empty(STEPS, 1),
    }
    for prefix in ("", "next_"):
        for name in ("done", "terminated", "truncated"):
            out[prefix + name] = torch.zeros(STEPS, 1, dtype=torch.bool)
    o, a, no, r = (out[k].numpy() for k in ("observation", "action", "next_observation", "reward"))
    d, te, tr = (out[k].numpy() for k in ("next_done", "next_terminated", "next_truncated"))
    obs, _ = env.reset(seed=seed)
    for t in range(STEPS):
        o[t] = obs
        a[t] = actions[t]
        obs, reward, term, trunc, _ = env.step(actions[t])
        no[t], r[t], te[t], tr[t], d[t] = obs, reward, term, trunc, term or trunc
        if term or trunc:
            obs, _ = env.reset()
    return out


def test_gym_cartpole_rollout_plain(benchmark):
    gym = pytest.importorskip("gymnasium")
    benchmark.group = "gymnasium CartPole-v1 rollout"
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    actions = _action_table(()).numpy().argmax(-1).tolist()
    _bench(benchmark, lambda: plain_gym_rollout(env, actions), rounds=50)


def test_gym_cartpole_rollout_raw(benchmark):
    gym = pytest.importorskip("gymnasium")
    benchmark.group = "gymnasium CartPole-v1 rollout"
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    actions = _action_table(()).numpy().argmax(-1).tolist()

    def run():
        # Converts to torch as a user would: observations per step, the rest stacked at the end.
        nonlocal obs
        first = torch.from_numpy(obs)
        observations, rewards, terms, truncs = [], [], [], []
        for t in range(STEPS):
            obs, reward, term, trunc, _ = env.step(actions[t])
            observations.append(torch.from_numpy(obs))
            rewards.append(reward)
            terms.append(term)
            truncs.append(trunc)
            if term or trunc:
                obs, _ = env.reset()
                observations.append(torch.from_numpy(obs))
        return (
            first,
            torch.stack(observations),
            torch.tensor(rewards, dtype=torch.float32),
            torch.tensor(terms),
            torch.tensor(truncs),
        )

    _bench(benchmark, run, rounds=50)


def test_plain_gym_rollout_matches_tdrl():
    """The plain loop does the same work as the tdrl rollout: same entries and values."""
    gym = pytest.importorskip("gymnasium")
    _, run = _gym_rollout(categorical=True)
    want = run()
    plain_env = gym.make("CartPole-v1")
    plain_env.reset(seed=0)  # GymEnv.set_seed(0): a seeded reset at once (TorchRL's)
    actions = _action_table(()).numpy().argmax(-1).tolist()
    got = plain_gym_rollout(plain_env, actions)
    assert len(want.keys(True, True)) == len(got)
    for key, value in got.items():
        tkey = ("next", key[5:]) if key.startswith("next_") else key
        tkey = ("next", "reward") if key == "reward" else tkey
        torch.testing.assert_close(value, want[tkey], msg=f"key {key}")


# ----------------------------------------------------------------- step_mdp
def _stepped(env) -> TensorDict:
    td = env.reset()
    return env.step(env.rand_action(td))


def _to_dict(td) -> dict:
    return {k: _to_dict(v) if isinstance(v, TensorDict) else v for k, v in td.items()}


DONE_NAMES = frozenset({"done", "terminated", "truncated"})


def dict_step_mdp(
    data: dict,
    *,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
) -> dict:
    """A plain nested-dict step_mdp with the same options as tdrl's (leaf names excluded at any
    depth): the next entries minus the excluded ones, plus the root entries they lack."""
    drop = ({"reward"} if exclude_reward else set()) | (DONE_NAMES if exclude_done else set())
    root_drop = drop | {"next"} | ({"action"} if exclude_action else set())

    def copy(node: dict, names: set) -> dict:
        return {
            k: copy(v, names) if type(v) is dict else v for k, v in node.items() if k not in names
        }

    def fill(dest: dict, src: dict) -> None:
        for k, v in src.items():
            if k in root_drop:
                continue
            if k not in dest:
                dest[k] = copy(v, root_drop) if type(v) is dict else v
            elif type(v) is dict:
                fill(dest[k], v)

    def carry_actions(dest: dict, src: dict) -> None:
        for k, v in src.items():
            if k == "action":
                dest[k] = v
            elif k != "next" and type(v) is dict and k in dest:
                carry_actions(dest[k], v)

    out = copy(data["next"], drop)
    if keep_other:
        fill(out, data)
    elif not exclude_action:
        carry_actions(out, data)
    return out


ENVS = {
    "flat": lambda: CartPoleEnv(batch_size=(32,)),
    "nested": lambda: MultiAgentNavigationEnv(batch_size=(32,), n_agents=4),
}
# the step_mdp options users pass (TorchRL's arguments); "default" is what envs and collectors use
OPTIONS: dict[str, dict[str, bool]] = {
    "default": {},
    "no_keep_other": {"keep_other": False},
    "exclude_done": {"exclude_done": True},
    "keep_action": {"exclude_action": False},
}


def _dict_leaves(data: dict, prefix: tuple = ()) -> set:
    out = set()
    for k, v in data.items():
        out |= _dict_leaves(v, (*prefix, k)) if type(v) is dict else {(*prefix, k)}
    return out


def _td_leaves(td) -> set:
    return {k if isinstance(k, tuple) else (k,) for k in td.keys(True, True)}


def _free_kwargs(env, option: str) -> dict:
    keys = {"reward_keys": env.reward_keys, "action_keys": env.action_keys}
    return {"done_keys": env.done_keys, **keys, **OPTIONS[option]}


@pytest.mark.parametrize("layout", sorted(ENVS))
def test_step_mdp_env_plan(benchmark, layout):
    benchmark.group = f"step_mdp {layout} default"
    env = ENVS[layout]()
    td = _stepped(env)
    benchmark(env.step_mdp, td)


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("layout", sorted(ENVS))
def test_step_mdp_free_function(benchmark, layout, option):
    benchmark.group = f"step_mdp {layout} {option}"
    env = ENVS[layout]()
    td = _stepped(env)
    benchmark(step_mdp, td, **_free_kwargs(env, option))


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("layout", sorted(ENVS))
def test_step_mdp_raw_dict(benchmark, layout, option):
    benchmark.group = f"step_mdp {layout} {option}"
    env = ENVS[layout]()
    td = _stepped(env)
    data = _to_dict(td)
    # the baseline produces the same entries as tdrl's step_mdp with the same options
    want = _td_leaves(step_mdp(td, **_free_kwargs(env, option)))
    assert _dict_leaves(dict_step_mdp(data, **OPTIONS[option])) == want
    benchmark(dict_step_mdp, data, **OPTIONS[option])


def test_raw_cartpole_matches_the_env():
    """The raw baseline does the same work: same dynamics as CartPoleEnv from the same state."""
    env = CartPoleEnv(batch_size=(8,))
    actions = _action_table((8,))
    raw = raw_cartpole_rollout((8,), actions)
    td = env.set_state(raw["obs"][:, 0])
    td = env.step(td.set("action", actions[0]))
    np.testing.assert_allclose(td["next", "observation"].numpy(), raw["nobs"][:, 0].numpy())
