"""Collector benchmarks: tdrl collectors beside hand-written plain loops doing the same work.

Every group pairs a tdrl collector with a "raw" loop that steps the same env with the same policy
and stores the same entries into preallocated tensors: one process for :class:`Collector`, two
worker processes exchanging batches through shared memory for the multi-process collectors.
``tdrl`` iterates with the default (every batch a copy the caller owns), ``tdrl_same_td`` with
``return_same_td=True`` (the collector's memory, reused).
Envs: gymnasium ``Pendulum-v1`` (one env per process) and the built-in ``PendulumV1Env`` with 256
pendulums; policies: uniform random actions and a small MLP. One op is one batch; the frames/s
are in ``extra_info``::

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
    for name in ("done", "terminated", "truncated"):
        out[name] = torch.zeros(*lead, 1, dtype=torch.bool)
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


def _plain(kind: str, policy, buffers: dict[str, torch.Tensor]):
    return (PlainGym if kind == "gym" else PlainPendulum)(policy, buffers)


def _plain_worker(kind: str, policy, buffers: dict[str, torch.Tensor], conn) -> None:
    torch.set_num_threads(1)
    loop = _plain(kind, policy, buffers)
    with torch.no_grad():
        while conn.recv():
            loop.collect()
            conn.send(True)


class PlainWorkers:
    """Two processes running the plain loop into shared-memory buffers, one pipe message each
    way per batch: the hand-written version of a two-worker collector."""

    def __init__(self, kind: str, policy) -> None:
        self.buffers = [
            {k: v.share_memory_() for k, v in _buffers(kind, STEPS[kind]).items()} for _ in "ab"
        ]
        self.conns, self.procs = [], []
        for buf in self.buffers:
            parent, child = CTX.Pipe()
            proc = CTX.Process(target=_plain_worker, args=(kind, policy, buf, child))
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


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("impl", IMPLS)  # innermost: the variants run back to back
def test_single_process(benchmark, impl, kind, policy):
    benchmark.group = f"Collector {kind} {policy}"
    mlp = _mlp() if policy == "mlp" else None
    if impl == "raw":
        loop = _plain(kind, mlp, _buffers(kind, STEPS[kind]))
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
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("impl", IMPLS)
def test_two_workers(benchmark, impl, mode, kind, policy):
    benchmark.group = f"Multi{mode.capitalize()}Collector 2 workers {kind} {policy}"
    mlp = _mlp() if policy == "mlp" else None
    # sync: one batch of both workers; async: two batches (whichever workers finish first), as
    # one async batch is often ready at once while the other worker was collecting
    per_op = 2 * _frames(kind)
    batches_per_op = 1 if mode == "sync" else 2
    if impl == "raw":
        workers = PlainWorkers(kind, mlp)
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
