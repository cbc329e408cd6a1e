"""Batched env benchmarks: SerialEnv(4) and ParallelEnv(4) beside hand-written baselines.

Two families, gymnasium ``CartPole-v1`` (through ``GymEnv``) and the built-in ``PendulumV1Env``.
Each group holds, for the same 4 sub-envs and the same pre-drawn actions:

- ``serial``: ``SerialEnv(4, make)``; ``parallel``: ``ParallelEnv(4, make)`` (fork);
  ``parallel_2x2``: ``ParallelEnv(2, lambda: SerialEnv(2, make))`` (one process per core here).
- ``loop``: a hand-written loop over the 4 sub-envs in this process, stacking the leaves of their
  ``"next"`` and post-reset roots into batched tensors (the single-process baseline).
- ``mp``: a hand-written 2-process version, 2 sub-envs per process, with the batched tensors in
  shared memory and single-byte pipe messages (the multiprocess baseline); outputs are cloned, as
  ParallelEnv returns fresh tensors.
- ``raw`` (CartPole only): plain gymnasium envs in a loop, numpy results stacked into tensors;
  what a step costs without any tensordict machinery.
- ``plain_serial``, ``plain_parallel``, ``plain_parallel_2x2`` (CartPole only): the issue's plain
  loops, the baselines of ``serial``, ``parallel`` and ``parallel_2x2``: gymnasium ``step``,
  numpy->torch conversion (numpy writes into a preallocated ``[4]`` torch output holding what
  tdrl returns: next observation, reward and done flags, and the root observation after the
  reset of done envs), in this process, in 4 processes (one env each) or in 2 processes (two
  envs each), the processes writing into shared memory and woken by one-byte pipe messages.

Every version runs ``STEPS`` steps of ``step_and_maybe_reset`` (done members reset). Steps/s =
``STEPS * 4 / mean``; ratio tdrl / baseline = ``baseline mean / tdrl mean``. Run::

    .venv/bin/python -m pytest benchmarks/test_batched_envs.py --benchmark-enable -p no:cacheprovider

(``-p no:doctest`` clashes with the ``--doctest-modules`` of the pytest addopts.)
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.builtin import PendulumV1Env
from tdrl.envs.core import EnvBase

torch.set_num_threads(1)

N_ENVS = 4
STEPS = 100
ROUNDS = 20


def _make_cartpole() -> EnvBase:
    from tdrl.envs.libs import GymEnv

    return GymEnv("CartPole-v1", categorical_action_encoding=True)


def _make_pendulum() -> EnvBase:
    return PendulumV1Env()


FAMILIES: dict[str, Callable[[], EnvBase]] = {
    "gym CartPole-v1": _make_cartpole,
    "builtin Pendulum": _make_pendulum,
}


def _actions(make: Callable[[], EnvBase]) -> torch.Tensor:
    """``[STEPS, N_ENVS, *action_shape]`` random actions drawn once."""
    env = make()
    spec = env.action_spec.expand(STEPS, N_ENVS, *env.action_spec.shape)
    env.close()
    torch.manual_seed(0)
    return spec.rand()


def _family(name: str) -> Callable[[], EnvBase]:
    if name.startswith("gym"):
        pytest.importorskip("gymnasium")
    return FAMILIES[name]


def _bench(benchmark, fn) -> None:
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=1)


# ----------------------------------------------------------------------------- tdrl
def _run_batched(env: EnvBase, actions: torch.Tensor) -> Callable[[], None]:
    td = env.reset()
    actions = actions.reshape(STEPS, *env.action_spec.shape)

    def run() -> None:
        nonlocal td
        for t in range(STEPS):
            td.set("action", actions[t])
            _, td = env.step_and_maybe_reset(td)

    return run


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("impl", ["serial", "parallel", "parallel_2x2"])
def test_batched_tdrl(benchmark, family, impl):
    make = _family(family)
    benchmark.group = f"batched {family} x{N_ENVS}"
    if impl == "serial":
        env: EnvBase = SerialEnv(N_ENVS, make)
    elif impl == "parallel":
        env = ParallelEnv(N_ENVS, make, mp_start_method="fork")
    else:
        env = ParallelEnv(2, lambda: SerialEnv(2, make), mp_start_method="fork")
    with env:
        _bench(benchmark, _run_batched(env, _actions(make)))


# ----------------------------------------------------------------------------- baselines
_OUT_KEYS = ("observation", "reward", "done", "terminated", "truncated")


def _step_envs(envs, roots, actions_t) -> tuple[list[TensorDictBase], list[TensorDictBase]]:
    stepped = []
    for i, env in enumerate(envs):
        roots[i].set("action", actions_t[i])
        out, roots[i] = env.step_and_maybe_reset(roots[i])
        stepped.append(out.get("next"))
    return stepped, roots


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_baseline_loop(benchmark, family):
    make = _family(family)
    benchmark.group = f"batched {family} x{N_ENVS}"
    envs = [make() for _ in range(N_ENVS)]
    roots = [env.reset() for env in envs]
    actions = _actions(make)

    def run() -> None:
        nonlocal roots
        for t in range(STEPS):
            stepped, roots = _step_envs(envs, roots, actions[t])
            _ = {k: torch.stack([s.get(k) for s in stepped]) for k in _OUT_KEYS}
            _ = torch.stack([r.get("observation") for r in roots])

    _bench(benchmark, run)
    for env in envs:
        env.close()


def _mp_worker(conn, make, first: int, count: int, shared: dict[str, torch.Tensor]) -> None:
    torch.set_num_threads(1)
    envs = [make() for _ in range(count)]
    roots = [env.reset() for env in envs]
    rows = range(first, first + count)
    while conn.recv_bytes() == b"s":
        stepped, roots = _step_envs(envs, roots, [shared["action"][i] for i in rows])
        for j, i in enumerate(rows):
            for key in _OUT_KEYS:
                shared[key][i].copy_(stepped[j].get(key))
            shared["root_observation"][i].copy_(roots[j].get("observation"))
        conn.send_bytes(b"k")
    for env in envs:
        env.close()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_baseline_mp(benchmark, family):
    make = _family(family)
    benchmark.group = f"batched {family} x{N_ENVS}"
    probe = make()
    fake = probe.fake_tensordict()
    probe.close()
    shared = {
        k: fake.get(("next", k)).expand(N_ENVS, *fake.get(("next", k)).shape).clone()
        for k in _OUT_KEYS
    }
    shared["root_observation"] = shared["observation"].clone()
    actions = _actions(make)
    shared["action"] = actions[0].clone()
    for t in shared.values():
        t.share_memory_()
    ctx = multiprocessing.get_context("fork")
    conns, procs = [], []
    for w in range(2):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_mp_worker, args=(child, make, 2 * w, 2, shared))
        proc.start()
        conns.append(parent)
        procs.append(proc)

    def run() -> None:
        for t in range(STEPS):
            shared["action"].copy_(actions[t])
            for c in conns:
                c.send_bytes(b"s")
            for c in conns:
                c.recv_bytes()
            _ = {k: v.clone() for k, v in shared.items() if k != "action"}

    try:
        _bench(benchmark, run)
    finally:
        for c in conns:
            c.send_bytes(b"q")
        for p in procs:
            p.join(10)


def test_batched_baseline_raw_gymnasium(benchmark):
    gym = pytest.importorskip("gymnasium")
    benchmark.group = f"batched gym CartPole-v1 x{N_ENVS}"
    envs = [gym.make("CartPole-v1") for _ in range(N_ENVS)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    actions = _actions(_make_cartpole).numpy()

    def run() -> None:
        for t in range(STEPS):
            obs, rew, term, trunc, root = [], [], [], [], []
            for i, env in enumerate(envs):
                o, r, te, tr, _ = env.step(int(actions[t, i]))
                obs.append(o)
                rew.append(r)
                term.append(te)
                trunc.append(tr)
                root.append(env.reset()[0] if te or tr else o)
            _ = torch.as_tensor(np.stack(obs)), torch.as_tensor(np.stack(root))
            _ = torch.tensor(rew).unsqueeze(-1), torch.tensor(term), torch.tensor(trunc)

    _bench(benchmark, run)
    for env in envs:
        env.close()


# ----------------------------------------------------------------------------- plain loops
_PLAIN_KEYS = ("observation", "reward", "done", "terminated", "truncated", "root_observation")


def _plain_output(shared: bool = False) -> dict[str, torch.Tensor]:
    """The preallocated ``[N_ENVS]`` output of the plain loops (the actions too)."""
    out = {
        "observation": torch.zeros(N_ENVS, 4),
        "reward": torch.zeros(N_ENVS, 1),
        "root_observation": torch.zeros(N_ENVS, 4),
        "action": torch.zeros(N_ENVS, dtype=torch.int64),
    }
    for name in ("done", "terminated", "truncated"):
        out[name] = torch.zeros(N_ENVS, 1, dtype=torch.bool)
    if shared:
        for t in out.values():
            t.share_memory_()
    return out


def _plain_envs(rows: range) -> list:
    import gymnasium as gym

    envs = [gym.make("CartPole-v1") for _ in rows]
    for i, env in zip(rows, envs):
        env.reset(seed=i)
    return envs


def _plain_step(envs: list, rows: range, views: dict) -> None:
    """One step of the envs of ``rows``: actions read from, results written to numpy views of
    the torch output; done envs are reset and their root row gets the reset observation."""
    act, obs, rew = views["action"], views["observation"], views["reward"]
    done, term, trunc, root = (
        views[k] for k in ("done", "terminated", "truncated", "root_observation")
    )
    for i, env in zip(rows, envs):
        o, r, te, tr, _ = env.step(int(act[i]))
        obs[i], rew[i], term[i], trunc[i], done[i] = o, r, te, tr, te or tr
        root[i] = env.reset()[0] if te or tr else o


@pytest.mark.parametrize("impl", ["plain_serial"])
def test_batched_plain(benchmark, impl):
    pytest.importorskip("gymnasium")
    benchmark.group = f"batched gym CartPole-v1 x{N_ENVS}"
    rows = range(N_ENVS)
    envs = _plain_envs(rows)
    out = _plain_output()
    views = {k: v.numpy() for k, v in out.items()}
    actions = _actions(_make_cartpole).numpy()

    def run() -> None:
        for t in range(STEPS):
            views["action"][:] = actions[t]
            _plain_step(envs, rows, views)

    _bench(benchmark, run)
    for env in envs:
        env.close()


def _plain_worker(conn, rows: range, shared: dict[str, torch.Tensor]) -> None:
    torch.set_num_threads(1)
    envs = _plain_envs(rows)
    views = {k: v.numpy() for k, v in shared.items()}
    while conn.recv_bytes() == b"s":
        _plain_step(envs, rows, views)
        conn.send_bytes(b"k")
    for env in envs:
        env.close()


@contextlib.contextmanager
def _plain_processes(per_proc: int) -> Iterator[Callable[[], None]]:
    """The plain multiprocess loop (``per_proc`` envs per process) as a ``run`` function."""
    shared = _plain_output(shared=True)
    actions = _actions(_make_cartpole).numpy()
    ctx = multiprocessing.get_context("fork")
    conns, procs = [], []
    for first in range(0, N_ENVS, per_proc):
        parent, child = ctx.Pipe()
        rows = range(first, first + per_proc)
        proc = ctx.Process(target=_plain_worker, args=(child, rows, shared))
        proc.start()
        conns.append(parent)
        procs.append(proc)
    act = shared["action"].numpy()

    def run() -> None:
        for t in range(STEPS):
            act[:] = actions[t]
            for c in conns:
                c.send_bytes(b"s")
            for c in conns:
                c.recv_bytes()

    try:
        yield run
    finally:
        for c in conns:
            c.send_bytes(b"q")
        for p in procs:
            p.join(10)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("impl", ["plain_parallel", "plain_parallel_2x2"])
def test_batched_plain_mp(benchmark, impl):
    pytest.importorskip("gymnasium")
    benchmark.group = f"batched gym CartPole-v1 x{N_ENVS}"
    with _plain_processes(1 if impl == "plain_parallel" else 2) as run:
        _bench(benchmark, run)


@pytest.mark.timeout(300)
def test_batched_parallel_interleaved(benchmark, capsys):
    """``ParallelEnv(4)`` and ``plain_parallel`` alternating round by round.

    The two run in separate tests above, minutes apart on a shared machine: their ratio then
    moves by +-0.1 between runs. Here a plain round runs before each timed tdrl round (the
    ``setup`` of the round, timed by hand), so both see the same machine state; the ratios
    (plain / tdrl, of the minima and of the medians) are printed and kept in ``extra_info``.
    """
    pytest.importorskip("gymnasium")
    benchmark.group = f"batched gym CartPole-v1 x{N_ENVS}, interleaved with plain_parallel"
    plain_times: list[float] = []
    with (
        ParallelEnv(N_ENVS, _make_cartpole, mp_start_method="fork") as env,
        _plain_processes(1) as plain,
    ):
        tdrl = _run_batched(env, _actions(_make_cartpole))

        def setup() -> None:
            start = time.perf_counter()
            plain()
            plain_times.append(time.perf_counter() - start)

        benchmark.pedantic(tdrl, setup=setup, rounds=2 * ROUNDS, iterations=1, warmup_rounds=1)
    if benchmark.disabled or benchmark.stats is None:
        return
    stats = benchmark.stats.stats
    plain_times = plain_times[1:]  # the warm-up round's
    ratios = {
        "ratio_min": min(plain_times) / stats.min,
        "ratio_median": statistics.median(plain_times) / stats.median,
    }
    benchmark.extra_info.update(ratios)
    with capsys.disabled():
        print(
            f"\nParallelEnv(4) vs plain_parallel, interleaved: plain/tdrl "
            f"min {ratios['ratio_min']:.2f}, median {ratios['ratio_median']:.2f}"
        )


def test_plain_step_matches_serial_env():
    """The plain loop does the same work as SerialEnv's step_and_maybe_reset (same values)."""
    pytest.importorskip("gymnasium")
    actions = _actions(_make_cartpole)
    rows = range(N_ENVS)
    envs = _plain_envs(rows)
    views = {k: v.numpy() for k, v in _plain_output().items()}
    env = SerialEnv(N_ENVS, _make_cartpole)
    env.set_seed(0)
    # The seed chain SerialEnv.set_seed gives: sub-env i + 1 gets what sub-env i's set_seed
    # returned; GymEnv.set_seed resets with its seed at once (TorchRL), and reset() goes on.
    seed = 0
    for e in envs:
        e.reset(seed=seed)
        e.reset()
        seed = _make_cartpole().set_seed(seed)
    td = env.reset()
    for t in range(STEPS):
        td.set("action", actions[t])
        out, td = env.step_and_maybe_reset(td)
        views["action"][:] = actions[t].numpy()
        _plain_step(envs, rows, views)
        for key in _PLAIN_KEYS[:5]:
            np.testing.assert_allclose(views[key], out["next", key].numpy(), err_msg=key)
        np.testing.assert_allclose(views["root_observation"], td["observation"].numpy())
    env.close()
