"""RayCollector benchmarks: Ray actors beside the local multi-process collectors and plain Ray.

Groups (one op is one batch of every worker; frames/s in ``extra_info``):

- ``2 workers {sync,async} {env}``: :class:`RayCollector` with 2 actors beside
  :class:`MultiSyncCollector`/:class:`MultiAsyncCollector` with 2 worker processes, same env,
  policy and frames per batch, and ``raw_ray``: two hand-written Ray actors stepping the same env
  with the same policy into preallocated tensors and returning them (the floor of Ray's cost).
- ``RayCollector scaling {env}``: 1 actor beside 2 actors (same frames per actor): the
  frames/s of 2 over the frames/s of 1 is the scaling.

Envs: gymnasium ``Pendulum-v1`` (one env per worker, 200 steps per batch) and the built-in
``PendulumV1Env`` with 256 pendulums (20 or 100 steps per batch: Ray's cost is per batch, about
the same for both, so the ratio depends on the batch size); the policy is a small MLP. Ray is
started once for the module (a local instance with 4 logical CPUs, so two 1-CPU actors fit beside
the driver, and workers at nice 0 like the local collectors' workers instead of Ray's default
15); its start-up and the actors' are not timed::

    .venv/bin/python -m pytest benchmarks/test_distributed.py --benchmark-enable -p no:cacheprovider
"""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import pytest
import ray
import ray.cloudpickle
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import MultiAsyncCollector, MultiSyncCollector
from tdrl.distributed import RayCollector, connect_ray
from tdrl.envs import PendulumV1Env
from tdrl.envs.libs import GymEnv

torch.set_num_threads(1)

N_PENDULUMS = 256
# steps per batch and worker: Ray's cost is per batch, so the batch size sets the ratio
STEPS = {"gym": 200, "builtin20": 20, "builtin100": 100}
ROUNDS = 20
KINDS = list(STEPS)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh()
    ).append(torch.nn.Linear(64, 1))


def _policy() -> TensorDictModule:
    return TensorDictModule(_mlp(), in_keys=["observation"], out_keys=["action"])


def _env(kind: str):
    if kind == "gym":
        return GymEnv("Pendulum-v1")
    return PendulumV1Env(batch_size=(N_PENDULUMS,))


def _frames(kind: str) -> int:
    return STEPS[kind] * (N_PENDULUMS if kind != "gym" else 1)


class _RawWorker:
    """A plain Ray actor: the env stepped by hand, the MLP run on raw tensors, every step
    written into preallocated tensors that are returned (what Ray then serialises)."""

    def __init__(self, kind: str) -> None:
        torch.set_num_threads(1)
        self.kind, self.steps, self.mlp = kind, STEPS[kind], _mlp()
        lead = (self.steps,) if kind == "gym" else (N_PENDULUMS, self.steps)
        self.buf = {k: torch.zeros(*lead, n) for k, n in (("obs", 3), ("action", 1))}
        self.buf.update(next_obs=torch.zeros(*lead, 3), reward=torch.zeros(*lead, 1))
        self.buf["done"] = torch.zeros(*lead, 1, dtype=torch.bool)
        if kind == "gym":
            self.env = gym.make("Pendulum-v1")
            self.obs = torch.from_numpy(self.env.reset(seed=0)[0])
        else:
            self.env = PendulumV1Env(batch_size=(N_PENDULUMS,))
            self.td = self.env.reset()

    @torch.no_grad()
    def collect(self) -> dict[str, torch.Tensor]:
        buf = self.buf
        for t in range(self.steps):
            if self.kind == "gym":
                action = self.mlp(self.obs).clamp(-2.0, 2.0)
                obs, reward, term, trunc, _ = self.env.step(action.numpy())
                buf["obs"][t], buf["action"][t] = self.obs, action
                self.obs = torch.from_numpy(obs)
                buf["next_obs"][t], buf["reward"][t], buf["done"][t] = (
                    self.obs,
                    reward,
                    term or trunc,
                )
                if term or trunc:
                    self.obs = torch.from_numpy(self.env.reset()[0])
            else:
                td = self.td.set("action", self.mlp(self.td["observation"]))
                td = self.env.step(td)
                buf["obs"][:, t], buf["action"][:, t] = td["observation"], td["action"]
                buf["next_obs"][:, t] = td["next", "observation"]
                buf["reward"][:, t], buf["done"][:, t] = td["next", "reward"], td["next", "done"]
                self.td = self.env.maybe_reset(self.env.step_mdp(td))
        return {k: v.clone() for k, v in buf.items()}


@pytest.fixture(scope="module", autouse=True)
def _ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Ray runs its workers at nice 15 by default: on cores shared with other work they would
    # get less CPU than the multi-process collectors' workers (nice 0), whatever tdrl does
    os.environ.setdefault("RAY_worker_niceness", "0")
    connect_ray(num_cpus=4)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


def _run(benchmark, fn, frames: int) -> None:
    fn()  # warm up: the first batches allocate
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["frames_per_s"] = frames / benchmark.stats.stats.mean


def _env_fn(kind):
    return lambda: _env(kind)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("impl", ["multi", "ray", "raw_ray"])
def test_two_workers(benchmark, impl, mode, kind):
    benchmark.group = f"2 workers {mode} {kind}"
    per_op = 2 * _frames(kind)
    batches = 1 if mode == "sync" else 2  # async: the two batches that finish first
    if impl == "raw_ray":
        workers = [ray.remote(num_cpus=1)(_RawWorker).remote(kind) for _ in range(2)]
        if mode == "sync":
            _run(benchmark, lambda: ray.get([w.collect.remote() for w in workers]), per_op)
        else:
            _run(benchmark, _raw_async(workers), per_op)
        for w in workers:
            ray.kill(w)
        return
    kwargs = {"frames_per_batch": per_op // batches}
    if impl == "multi":
        cls = MultiSyncCollector if mode == "sync" else MultiAsyncCollector
        collector = cls([_env_fn(kind)] * 2, _policy(), mp_start_method="fork", **kwargs)
    else:
        collector = RayCollector([_env_fn(kind)] * 2, _policy(), sync=mode == "sync", **kwargs)
    with collector:
        it = iter(collector)
        _run(benchmark, lambda: [next(it) for _ in range(batches)], per_op)


def _raw_async(workers):
    """Keeps one batch in flight per worker and takes the two that finish first."""
    pending = {w.collect.remote(): w for w in workers}

    def two():
        out = []
        for _ in range(2):
            [ready], _ = ray.wait(list(pending), num_returns=1)
            worker = pending.pop(ready)
            out.append(ray.get(ready))
            pending[worker.collect.remote()] = worker
        return out

    return two


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("actors", [1, 2])
def test_scaling(benchmark, actors, kind):
    benchmark.group = f"RayCollector scaling {kind}"
    frames = actors * _frames(kind)
    with RayCollector(
        [_env_fn(kind)] * actors, _policy(), frames_per_batch=frames, sync=True
    ) as collector:
        it = iter(collector)
        _run(benchmark, lambda: next(it), frames)
