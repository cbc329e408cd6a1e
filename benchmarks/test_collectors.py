"""Collector benchmarks: tdrl collectors beside hand-written plain loops doing the same work.

Every group pairs a tdrl collector with a "raw" loop that steps the same env with the same policy
and stores the same entries into preallocated tensors: one process for :class:`Collector`, two
worker processes exchanging batches through shared memory for the multi-process collectors.
``tdrl`` iterates with the default (every batch a copy the caller owns), ``tdrl_same_td`` with
``return_same_td=True`` (the collector's memory, reused).
Envs: gymnasium ``Pendulum-v1`` (one env per process) and the built-in ``PendulumV1Env`` with 256
pendulums; policies: uniform random actions and a small MLP. One op is one batch; the frames/s
are in ``extra_info``.

Two baselines for the gymnasium env: ``raw`` (per-step torch writes into preallocated tensors)
and ``plain``, the issue's leaner plain loop doing the same work as the collector: gymnasium
``step``, numpy->torch conversion (the observation handed to the policy with
``torch.from_numpy``; every result written through numpy views into a preallocated torch output
holding every entry of the collector's batch, trajectory ids included), a reset after each done::

    .venv/bin/python -m pytest benchmarks/test_collectors.py --benchmark-enable -p no:cacheprovider
"""

from __future__ import annotations

import math
import multiprocessing
from multiprocessing import connection

import gymnasium as gym
import pytest
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from tdrl.envs import PendulumV1Env
from tdrl.envs.libs import GymEnv

torch.set_num_threads(1)

N_PENDULUMS = 256
STEPS = {"gym": 200, "builtin": 20}  # steps per batch and worker
ROUNDS = 20
CTX = multiprocessing.get_context("fork")


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 1),
    )


def _frames(kind: str) -> int:
    return STEPS[kind] * (N_PENDULUMS if kind == "builtin" else 1)


# ----------------------------------------------------------------- plain loops (no tdrl)
def _buffers(kind: str, steps: int) -> dict[str, torch.Tensor]:
    lead = (N_PENDULUMS, steps) if kind == "builtin" else (steps,)
    sizes = {"obs": 3, "action": 1, "reward": 1, "next_obs": 3}
    out = {name: torch.zeros(*lead, size) for name, size in sizes.items()}
    for name in ("done", "terminated", "truncated", "root_done", "root_terminated"):
        out[name] = torch.zeros(*lead, 1, dtype=torch.bool)
    out["root_truncated"] = torch.zeros(*lead, 1, dtype=torch.bool)
    out["traj_ids"] = torch.zeros(lead, dtype=torch.long)
    return out


class PlainGym:
    """One gymnasium Pendulum-v1 stepped by hand, steps stored in preallocated tensors."""

    def __init__(self, policy, buffers: dict[str, torch.Tensor]) -> None:
        self.env = gym.make("Pendulum-v1")
        self.obs = torch.from_numpy(self.env.reset(seed=0)[0])
        self.policy, self.buf = policy, buffers

    def collect(self) -> None:
        buf = self.buf
        for t in range(buf["obs"].shape[0]):
            obs = self.obs
            a = self.policy(obs) if self.policy is not None else torch.rand(1) * 4 - 2
            nxt, r, term, trunc, _ = self.env.step(a.numpy())
            nxt = torch.from_numpy(nxt)
            buf["obs"][t], buf["action"][t], buf["reward"][t] = obs, a, float(r)
            buf["next_obs"][t], buf["terminated"][t], buf["truncated"][t] = nxt, term, trunc
            buf["done"][t] = term or trunc
            self.obs = torch.from_numpy(self.env.reset()[0]) if term or trunc else nxt


class PlainPendulum:
    """256 pendulums (Pendulum-v1 dynamics) in raw torch, steps stored in preallocated tensors."""

    def __init__(self, policy, buffers: dict[str, torch.Tensor]) -> None:
        self.policy, self.buf = policy, buffers
        self.scale, self.shift = torch.tensor([2 * math.pi, 2.0]), torch.tensor([math.pi, 1.0])
        self.state = torch.rand(N_PENDULUMS, 2) * self.scale - self.shift
        self.steps = torch.zeros(N_PENDULUMS, 1, dtype=torch.long)

    def _obs(self) -> torch.Tensor:
        th, thd = self.state[:, :1], self.state[:, 1:]
        return torch.cat((th.cos(), th.sin(), thd), -1)

    def collect(self) -> None:
        buf, obs = self.buf, self._obs()
        for t in range(buf["obs"].shape[1]):
            a = self.policy(obs) if self.policy is not None else torch.rand(N_PENDULUMS, 1) * 4 - 2
            torque = a.clamp(-2.0, 2.0)
            th, thd = self.state[:, :1], self.state[:, 1:]
            upright = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
            cost = upright.square() + 0.1 * thd.square() + 0.001 * torque.square()
            new_dot = (thd + (15.0 * th.sin() + 3.0 * torque) * 0.05).clamp(-8.0, 8.0)
            self.state = torch.cat((th + new_dot * 0.05, new_dot), -1)
            self.steps += 1
            trunc = self.steps >= 200
            nxt = self._obs()
            buf["obs"][:, t], buf["action"][:, t], buf["reward"][:, t] = obs, a, -cost
            buf["next_obs"][:, t], buf["done"][:, t], buf["truncated"][:, t] = nxt, trunc, trunc
            buf["terminated"][:, t] = False
            if trunc.any():
                fresh = torch.rand(N_PENDULUMS, 2) * self.scale - self.shift
                self.state = torch.where(trunc, fresh, self.state)
                self.steps.masked_fill_(trunc, 0)
                nxt = self._obs()
            obs = nxt


class LeanGym:
    """The issue's plain loop: one gymnasium Pendulum-v1, numpy writes into torch buffers."""

    def __init__(self, policy, buffers: dict[str, torch.Tensor]) -> None:
        self.env = gym.make("Pendulum-v1")
        # As GymEnv.set_seed(0) (a seeded reset at once, TorchRL's) and the Collector's own reset.
        self.env.reset(seed=0)
        self.obs = self.env.reset()[0]
        self.policy, self.traj = policy, 0
        self.views = {k: v.numpy() for k, v in buffers.items()}

    def collect(self) -> None:
        v, env, policy, obs, traj = self.views, self.env, self.policy, self.obs, self.traj
        o, a, r, no, ids = v["obs"], v["action"], v["reward"], v["next_obs"], v["traj_ids"]
        d, te, tr = v["done"], v["terminated"], v["truncated"]
        for t in range(o.shape[0]):
            if policy is not None:
                act = policy(torch.from_numpy(obs)).numpy()
            else:
                act = torch.empty(1).uniform_(-2.0, 2.0).numpy()
            nxt, reward, term, trunc, _ = env.step(act)
            o[t], a[t], r[t], no[t], ids[t] = obs, act, reward, nxt, traj
            te[t], tr[t], d[t] = term, trunc, term or trunc
            if term or trunc:
                obs, traj = env.reset()[0], traj + 1
            else:
                obs = nxt
        self.obs, self.traj = obs, traj


def _plain(kind: str, policy, buffers: dict[str, torch.Tensor], lean: bool = False):
    if lean:
        return LeanGym(policy, buffers)
    return (PlainGym if kind == "gym" else PlainPendulum)(policy, buffers)


def _plain_worker(
    kind: str, policy, buffers: dict[str, torch.Tensor], conn, lean: bool = False
) -> None:
    torch.set_num_threads(1)
    loop = _plain(kind, policy, buffers, lean)
    with torch.no_grad():
        while conn.recv():
            loop.collect()
            conn.send(True)


class PlainWorkers:
    """Two processes running the plain loop into shared-memory buffers, one pipe message each
    way per batch: the hand-written version of a two-worker collector."""

    def __init__(self, kind: str, policy, lean: bool = False) -> None:
        self.buffers = [
            {k: v.share_memory_() for k, v in _buffers(kind, STEPS[kind]).items()} for _ in "ab"
        ]
        self.conns, self.procs = [], []
        for buf in self.buffers:
            parent, child = CTX.Pipe()
            proc = CTX.Process(target=_plain_worker, args=(kind, policy, buf, child, lean))
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        self.idle = list(self.conns)

    def sync_batch(self) -> None:
        for c in self.conns:
            c.send(True)
        for c in self.conns:
            c.recv()

    def async_batch(self) -> None:
        for c in self.idle:
            c.send(True)
        ready = connection.wait([c for c in self.conns if c not in self.idle] + self.idle)
        first = ready[0]
        first.recv()  # type: ignore[union-attr]
        self.idle = [first]

    def close(self) -> None:
        for c in self.idle:
            c.send(False)
        for c in self.conns:
            if c not in self.idle:
                c.recv()
                c.send(False)
        for p in self.procs:
            p.join(10)


# ----------------------------------------------------------------- tdrl
def _env_fn(kind: str):
    if kind == "gym":
        return lambda: GymEnv("Pendulum-v1")
    return lambda: PendulumV1Env(batch_size=(N_PENDULUMS,))


def _policy(mlp):
    return None if mlp is None else TensorDictModule(mlp, ["observation"], ["action"])


KINDS = ["gym", "builtin"]
POLICIES = ["random", "mlp"]


def _run(benchmark, fn, frames: int) -> None:
    fn()  # warm up: first batches allocate
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["frames_per_s"] = frames / benchmark.stats.stats.mean


# "tdrl" iterates with the default (each batch is a copy the caller owns), "tdrl_same_td" with
# return_same_td=True (the collector's own memory): their ratio is the cost of owning the batch.
IMPLS = ["raw", "tdrl_same_td", "tdrl"]
# the lean plain loop exists for the gymnasium env (the built-in baseline is plain torch already)
CASES = [(impl, kind) for kind in KINDS for impl in (["plain"] if kind == "gym" else []) + IMPLS]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("impl", "kind"), CASES)  # the variants of one env run back to back
def test_single_process(benchmark, impl, kind, policy):
    benchmark.group = f"Collector {kind} {policy}"
    mlp = _mlp() if policy == "mlp" else None
    if impl in ("raw", "plain"):
        loop = _plain(kind, mlp, _buffers(kind, STEPS[kind]), lean=impl == "plain")
        with torch.no_grad():
            _run(benchmark, loop.collect, _frames(kind))
        return
    collector = Collector(
        _env_fn(kind)(),
        _policy(mlp),
        frames_per_batch=_frames(kind),
        return_same_td=impl == "tdrl_same_td",
    )
    it = iter(collector)
    _run(benchmark, lambda: next(it), _frames(kind))
    collector.shutdown()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("impl", "kind"), CASES)
def test_two_workers(benchmark, impl, mode, kind, policy):
    benchmark.group = f"Multi{mode.capitalize()}Collector 2 workers {kind} {policy}"
    mlp = _mlp() if policy == "mlp" else None
    # sync: one batch of both workers; async: two batches (whichever workers finish first), as
    # one async batch is often ready at once while the other worker was collecting
    per_op = 2 * _frames(kind)
    batches_per_op = 1 if mode == "sync" else 2
    if impl in ("raw", "plain"):
        workers = PlainWorkers(kind, mlp, lean=impl == "plain")
        step = workers.sync_batch if mode == "sync" else workers.async_batch
        try:
            _run(benchmark, lambda: [step() for _ in range(batches_per_op)], per_op)
        finally:
            workers.close()
        return
    cls = MultiSyncCollector if mode == "sync" else MultiAsyncCollector
    with cls(
        [_env_fn(kind)] * 2,
        _policy(mlp),
        frames_per_batch=per_op // batches_per_op,
        mp_start_method="fork",
        return_same_td=impl == "tdrl_same_td",
    ) as collector:
        it = iter(collector)
        _run(benchmark, lambda: [next(it) for _ in range(batches_per_op)], per_op)


def test_lean_loop_matches_the_collector():
    """The plain loop does the same work as the Collector: same entries, same values."""
    steps = 300  # more than one Pendulum-v1 episode (200 steps): a reset happens
    mlp = _mlp()
    buffers = _buffers("gym", steps)
    with torch.no_grad():
        LeanGym(mlp, buffers).collect()
    env = GymEnv("Pendulum-v1")
    env.set_seed(0)
    collector = Collector(env, _policy(mlp), frames_per_batch=steps)
    batch = next(iter(collector))
    collector.shutdown()
    pairs = {
        "obs": "observation",
        "action": "action",
        "reward": ("next", "reward"),
        "next_obs": ("next", "observation"),
        "done": ("next", "done"),
        "terminated": ("next", "terminated"),
        "truncated": ("next", "truncated"),
        "root_done": "done",
        "root_terminated": "terminated",
        "root_truncated": "truncated",
        "traj_ids": ("collector", "traj_ids"),
    }
    assert len(pairs) == len(batch.keys(True, True))
    for name, key in pairs.items():
        torch.testing.assert_close(buffers[name], batch[key], msg=name)
