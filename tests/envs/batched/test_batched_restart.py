"""Batched envs after close: the next call restarts them (TorchRL), nothing leaks; state dicts."""

from __future__ import annotations

import gc
import os
import signal

import pytest
import torch

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.transforms import TransformedEnv, VecNorm
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


class SeedEcho(CountingEnv):
    """Its reset observation is its seed (-1 before any): tells whether a seed carried over."""

    def _reset(self, td):
        out = super()._reset(td)
        return out.set(
            "observation", torch.full((1,), float(-1 if self.seed is None else self.seed))
        )


def _normed():
    return TransformedEnv(CountingEnv(), VecNorm("observation", "n", decay=1.0))


_KINDS = {
    "serial": lambda n, make: SerialEnv(n, make),
    "parallel": lambda n, make: ParallelEnv(n, make, mp_start_method="fork"),
    "in-process": lambda n, make: ParallelEnv(1, make, serial_for_single=True),
}


def _calls(env):
    td = env.fake_tensordict().exclude("next")
    return {
        "reset": lambda: env.reset(),
        "step": lambda: env.step(env.rand_action(td.clone())),
        "step_and_maybe_reset": lambda: env.step_and_maybe_reset(env.rand_action(td.clone())),
        "set_seed": lambda: env.set_seed(1),
        "rollout": lambda: env.rollout(2),
        "state_dict": lambda: env.state_dict(),
        "load_state_dict": lambda: env.load_state_dict({}),
    }


@pytest.mark.parametrize("kind", list(_KINDS))
@pytest.mark.parametrize("call", list(_calls(SerialEnv(1, CountingEnv))))
def test_a_closed_env_restarts_on_the_next_call(kind, call):
    n = 1 if kind == "in-process" else 2
    env = _KINDS[kind](n, CountingEnv)
    env.rollout(3)
    env.close()
    env.close()  # idempotent
    assert env.is_closed
    _calls(env)[call]()
    assert not env.is_closed
    data = env.rollout(3)  # new sub-envs: counting from 0 again
    assert data["next", "observation"].flatten().tolist() == [1.0, 2.0, 3.0] * n
    env.close()


@pytest.mark.parametrize("kind", list(_KINDS))
def test_seeds_do_not_carry_over_a_restart(kind):
    n = 1 if kind == "in-process" else 2
    env = _KINDS[kind](n, SeedEcho)
    env.set_seed(7, static_seed=True)
    assert env.reset()["observation"].flatten().tolist() == [7.0] * n
    env.close()
    assert env.reset()["observation"].flatten().tolist() == [-1.0] * n  # TorchRL: new sub-envs
    env.set_seed(8, static_seed=True)
    assert env.reset()["observation"].flatten().tolist() == [8.0] * n
    env.close()


def test_restarts_leave_no_processes_fds_or_shared_memory():
    gc.collect()
    fds_before = len(os.listdir("/proc/self/fd"))
    shm_before = {n for n in os.listdir("/dev/shm") if n.startswith("torch_")}
    env = ParallelEnv(2, CountingEnv, mp_start_method="fork")
    old: list[int] = []
    for _ in range(3):
        env.rollout(2)
        pids = env.worker_pids
        assert len(pids) == 2 and not set(pids) & set(old)
        old += pids
        env.close()
        assert env.worker_pids == []
        assert not any(os.path.exists(f"/proc/{p}") for p in old)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= fds_before
    assert {n for n in os.listdir("/dev/shm") if n.startswith("torch_")} <= shm_before


def test_a_failure_needs_close_before_a_restart():
    env = ParallelEnv(2, CountingEnv, mp_start_method="fork", step_timeout=10)
    td = env.rand_action(env.reset())
    os.kill(env.worker_pids[1], signal.SIGKILL)
    with pytest.raises(WorkerError, match="died"):
        env.step(td)
    with pytest.raises(RuntimeError, match=r"closed after a failure: worker 1 .*env.close\(\)"):
        env.reset()
    env.close()  # acknowledges it
    assert env.rollout(2)["next", "observation"].flatten().tolist() == [1.0, 2.0] * 2
    env.close()


def test_serial_restart_checks_the_rebuilt_specs():
    built = []

    def make():
        built.append(1)
        return CountingEnv(batch_size=(len(built) > 2) * (2,))

    env = SerialEnv(2, make)
    env.reset()
    env.close()
    with pytest.raises(ValueError, match=r"SerialEnv.start: sub-env 0 .*batch_size"):
        env.reset()
    assert env.is_closed


def _count(state):
    """The VecNorm count in one sub-env's state dict (whatever the transform names it)."""
    found = []

    def walk(node):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif "count" in key:
                found.append(value)

    walk(state)
    (count,) = found
    return count


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_state_dict_round_trip_per_worker_and_broadcast(kind):
    env = _KINDS[kind](2, _normed)
    env.rollout(3)
    state = env.state_dict()
    assert sorted(state) == ["worker0", "worker1"]
    count = _count(state["worker0"])
    assert count.tolist() == [4.0]
    count.add_(100.0)  # the caller's copy: the env's statistics stay
    assert _count(env.state_dict()["worker0"]).tolist() == [4.0]
    env.close()
    assert _count(env.state_dict()["worker1"]).tolist() == [0.0]  # restarted: new sub-envs
    env.load_state_dict(state)
    got = env.state_dict()
    assert _count(got["worker0"]).tolist() == [104.0]
    assert _count(got["worker1"]).tolist() == [4.0]
    env.load_state_dict(state["worker0"])  # TorchRL: one sub-env's state goes to every worker
    assert _count(env.state_dict()["worker1"]).tolist() == [104.0]
    with pytest.raises(KeyError, match="no entry for worker 1"):
        env.load_state_dict({"worker0": state["worker0"]})
    env.close()


def test_state_dict_of_stateless_sub_envs_is_empty_and_refuses_entries():
    env = SerialEnv(2, CountingEnv)
    assert env.state_dict() == {"worker0": {}, "worker1": {}}
    env.load_state_dict({"worker0": {}, "worker1": {}})
    with pytest.raises(RuntimeError, match=r"CountingEnv.load_state_dict: unexpected keys"):
        env.load_state_dict({"x": torch.zeros(1)})
    env.load_state_dict({"x": torch.zeros(1)}, strict=False)


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_module_calls_reach_the_batched_env_only_as_in_torchrl(kind):
    # TorchRL's batched envs register no sub-module: apply/train/eval see the batched env alone
    env = _KINDS[kind](2, _normed)
    seen = []
    assert env.apply(seen.append) is env and seen == [env]
    assert list(env.children()) == []
    assert env.eval() is env and not env.training
    env.close()
