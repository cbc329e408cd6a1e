"""Transform benchmarks: built-in CartPole with StepCounter + RewardSum + ObservationNorm.

For batch sizes 1 and 1024, one group holds three rollouts of ``STEPS`` steps (done members are
reset, actions drawn up front and replayed):

- ``base``: the untransformed ``CartPoleEnv`` rollout;
- ``transformed``: ``TransformedEnv(CartPoleEnv, Compose(StepCounter(500), RewardSum(),
  ObservationNorm(loc, scale, standard_normal=True)))``;
- ``raw``: a plain-PyTorch loop over the untransformed env doing the same arithmetic by hand
  (step counts with truncation, episode returns and normalised observations, reset per member).

The transforms' cost is ``transformed / base - 1`` (aim: at most 30 % at batch 1024); the
machinery's cost beyond the arithmetic is ``transformed / raw``. Run::

    .venv/bin/python -m pytest benchmarks/test_transforms.py --benchmark-enable -p no:cacheprovider

(``-p no:doctest`` clashes with the ``--doctest-modules`` of the pytest addopts.)
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDictBase

from tdrl.envs.builtin import CartPoleEnv
from tdrl.envs.transforms import (
    Compose,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
)

torch.set_num_threads(1)

STEPS = 200
MAX_STEPS = 500
LOC = torch.tensor([0.0, 0.1, 0.0, -0.1])
SCALE = torch.tensor([1.0, 2.0, 0.5, 2.0])
BATCHES = {"batch 1": (1,), "batch 1024": (1024,)}


def _actions(batch: tuple[int, ...]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    index = torch.randint(0, 2, (STEPS, *batch), generator=gen)
    return list(torch.nn.functional.one_hot(index, 2).unbind(0))


def _replay(actions: list[torch.Tensor]):
    it = iter(actions)

    def policy(td: TensorDictBase) -> TensorDictBase:
        return td.set("action", next(it))

    return policy


def _transformed(batch: tuple[int, ...]) -> TransformedEnv:
    transform = Compose(
        StepCounter(MAX_STEPS), RewardSum(), ObservationNorm(LOC, SCALE, standard_normal=True)
    )
    return TransformedEnv(CartPoleEnv(batch_size=batch), transform)


def raw_rollout(env: CartPoleEnv, actions: list[torch.Tensor]) -> TensorDictBase:
    """The base env stepped by hand, with the three transforms' arithmetic written out."""
    td = env.reset()
    count = torch.zeros_like(td["done"], dtype=torch.int64)
    total = torch.zeros(td["done"].shape)
    td["observation"] = (td["observation"] - LOC) / SCALE
    td["step_count"], td["episode_reward"] = count, total
    steps = []
    for action in actions:
        td["action"] = action
        td = env.step(td)  # CartPole keeps its state inside: it does not read the observation
        nxt = td["next"]
        count = count + 1
        trunc = count >= MAX_STEPS
        nxt["truncated"] = nxt["truncated"] | trunc
        nxt["done"] = nxt["done"] | trunc
        total = total + nxt["reward"]
        nxt["observation"] = (nxt["observation"] - LOC) / SCALE
        nxt["step_count"], nxt["episode_reward"] = count, total
        steps.append(td)
        root = env.step_mdp(td)
        done = root["done"]
        if done.any():
            root["_reset"] = done
            root = env.reset(root)  # every member's observation comes back raw
            root["observation"] = (root["observation"] - LOC) / SCALE
            count = torch.where(done, 0, count)
            total = torch.where(done, 0.0, total)
            root["step_count"], root["episode_reward"] = count, total
        td = root
    return torch.stack(steps, 1)  # type: ignore[return-value]


def _run(benchmark, fn) -> None:
    benchmark.pedantic(fn, rounds=10, iterations=1, warmup_rounds=1)
    if benchmark.stats is not None:  # None with --benchmark-disable (a plain test run)
        benchmark.extra_info["steps_per_s"] = STEPS * fn.batch / benchmark.stats.stats.min


class _Job:
    def __init__(self, batch: tuple[int, ...], kind: str) -> None:
        self.batch = batch[0]
        self.actions = _actions(batch)
        self.kind = kind
        if kind == "transformed":
            self.env = _transformed(batch)
        else:
            self.env = CartPoleEnv(batch_size=batch)

    def __call__(self) -> TensorDictBase:
        self.env.set_seed(0)
        if self.kind == "raw":
            return raw_rollout(self.env, self.actions)  # type: ignore[arg-type]
        return self.env.rollout(STEPS, _replay(self.actions), break_when_any_done=False)


@pytest.mark.parametrize("name", list(BATCHES))
@pytest.mark.parametrize("kind", ["base", "transformed", "raw"])
def test_cartpole_rollout(benchmark, name, kind):
    benchmark.group = f"CartPole rollout, {name}"
    job = _Job(BATCHES[name], kind)
    _run(benchmark, job)


def test_raw_loop_matches_the_transformed_env():
    """The hand-written baseline does the same work as the transforms (same results)."""
    batch = (64,)
    actions = _actions(batch)
    env = _transformed(batch)
    env.set_seed(0)
    want = env.rollout(STEPS, _replay(actions), break_when_any_done=False)
    base = CartPoleEnv(batch_size=batch)
    base.set_seed(0)
    got = raw_rollout(base, actions)
    for key in want.keys(True, True):
        torch.testing.assert_close(got[key], want[key], msg=f"key {key}")


# ----------------------------------------------------------------- gymnasium CartPole
# The transforms a user typically stacks on a gymnasium env to track episodes: StepCounter()
# and RewardSum() (TorchRL's tutorials add them to every env). Three rollouts of GymEnv
# ("CartPole-v1") with STEPS steps, done envs reset, categorical actions replayed from a table:
# "base" (untransformed), "transformed" (both transforms) and "plain", a plain gymnasium loop
# doing the same work as "transformed" into a preallocated output (every entry of the tdrl
# rollout, step counts and episode returns included). Aim: base / transformed >= 0.8 in ops/s.
def _gym_actions() -> list[int]:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 2, (STEPS,), generator=gen).tolist()


def _gym_env(kind: str):
    from tdrl.envs.libs import GymEnv

    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    if kind == "transformed":
        return TransformedEnv(env, Compose(StepCounter(), RewardSum()))
    return env


def plain_gym_transformed(env, actions: list[int], seed: int | None = None) -> dict:
    """The plain loop: gymnasium step, numpy writes into preallocated torch tensors (see
    ``benchmarks/test_envs.py::plain_gym_rollout``), plus step counts and episode returns."""
    n = env.observation_space.shape[0]
    shapes = {"observation": (n,), "reward": (1,), "episode_reward": (1,)}
    out = {}
    for prefix in ("", "next_"):
        for name in ("observation", "episode_reward"):
            out[prefix + name] = torch.empty(STEPS, *shapes[name])
        out[prefix + "step_count"] = torch.empty(STEPS, 1, dtype=torch.int64)
        for name in ("done", "terminated", "truncated"):
            out[prefix + name] = torch.zeros(STEPS, 1, dtype=torch.bool)
    out["action"] = torch.empty(STEPS, dtype=torch.int64)
    out["reward"] = torch.empty(STEPS, 1)
    v = {k: t.numpy() for k, t in out.items()}
    o, no, a, r = v["observation"], v["next_observation"], v["action"], v["reward"]
    c, nc = v["step_count"], v["next_step_count"]
    ret, nret = v["episode_reward"], v["next_episode_reward"]
    d, te, tr = v["next_done"], v["next_terminated"], v["next_truncated"]
    obs, _ = env.reset(seed=seed)
    count, total = 0, 0.0
    for t in range(STEPS):
        o[t], c[t], ret[t], a[t] = obs, count, total, actions[t]
        obs, reward, term, trunc, _ = env.step(actions[t])
        count, total = count + 1, total + reward
        no[t], r[t], nc[t], nret[t] = obs, reward, count, total
        te[t], tr[t], d[t] = term, trunc, term or trunc
        if term or trunc:
            obs, _ = env.reset()
            count, total = 0, 0.0
    return out


@pytest.mark.parametrize("kind", ["base", "transformed", "plain"])
def test_gym_cartpole_rollout(benchmark, kind):
    gym = pytest.importorskip("gymnasium")
    benchmark.group = "gymnasium CartPole-v1 rollout, StepCounter + RewardSum"
    actions = _gym_actions()
    if kind == "plain":
        env = gym.make("CartPole-v1")
        env.reset(seed=0)
        fn = lambda: plain_gym_transformed(env, actions)  # noqa: E731
    else:
        tdrl_env = _gym_env(kind)
        tdrl_env.set_seed(0)
        table = torch.tensor(actions)
        fn = lambda: tdrl_env.rollout(STEPS, actions=table, break_when_any_done=False)  # noqa: E731
    benchmark.pedantic(fn, rounds=40, iterations=1, warmup_rounds=1)


def test_plain_gym_loop_matches_the_transformed_env():
    """The plain loop does the same work as the transformed GymEnv rollout (same values)."""
    gym = pytest.importorskip("gymnasium")
    actions = _gym_actions()
    env = _gym_env("transformed")
    env.set_seed(0)
    want = env.rollout(STEPS, actions=torch.tensor(actions), break_when_any_done=False)
    plain_env = gym.make("CartPole-v1")
    plain_env.reset(seed=0)  # GymEnv.set_seed(0): a seeded reset at once (TorchRL's)
    got = plain_gym_transformed(plain_env, actions)
    assert len(got) == len(want.keys(True, True))
    for key, value in got.items():
        tkey = ("next", key[5:]) if key.startswith("next_") else key
        tkey = ("next", "reward") if key == "reward" else tkey
        torch.testing.assert_close(value, want[tkey], msg=f"key {key}")
