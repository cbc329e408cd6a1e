"""ParallelEnv.step_and_maybe_reset builds the caller's outputs while the workers step: same
results as the two-trip version, fresh outputs, and the caller's data untouched on failure."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.core import EnvBase
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv, FailingEnv, NestedCountingEnv, assert_same_data

pytestmark = pytest.mark.timeout(60)

KWARGS = {"batch_size": (2,), "nested_max_steps": (2, 3), "max_steps": 4}


def _zero(env: EnvBase, td: TensorDict) -> TensorDict:
    return td.update(env.full_action_spec.zero())


def test_matches_the_two_trip_version_over_partial_resets():
    with ParallelEnv(3, NestedCountingEnv, KWARGS, mp_start_method="fork") as env:
        ref = SerialEnv(3, NestedCountingEnv, KWARGS)
        td, td_ref = env.reset(), ref.reset()
        for _ in range(11):
            extra = torch.arange(6.0).reshape(3, 2)  # an entry no spec declares rides along
            td.set("extra", extra)
            td_ref.set("extra", extra.clone())
            stepped, td = env.step_and_maybe_reset(_zero(env, td))
            stepped_ref, td_ref = EnvBase.step_and_maybe_reset(ref, _zero(ref, td_ref))
            assert_same_data(stepped, stepped_ref)
            assert_same_data(td, td_ref)
            assert td["extra"].flatten().tolist() == list(range(6))


def test_outputs_are_fresh_and_survive_later_steps():
    with ParallelEnv(2, CountingEnv, {"max_steps": 3}, mp_start_method="fork") as env:
        td = env.reset()
        kept = []
        for _ in range(7):
            stepped, td = env.step_and_maybe_reset(env.rand_action(td))
            kept.append((stepped["next"].clone(), stepped["next"]))
        for copy, original in kept:
            assert_same_data(original, copy)  # nothing written into them afterwards
        leaves = {t.data_ptr() for _, nxt in kept for t in nxt.values(True, True)}
        shared = {t.data_ptr() for t in env._buffers.next.leaves}
        assert not leaves & shared


def test_a_worker_error_leaves_the_callers_data_as_it_was():
    factories = [CountingEnv, FailingEnv]
    with ParallelEnv(2, factories, [{}, {"fail_after": 2}], mp_start_method="fork") as env:
        td = env.reset()
        stepped, td = env.step_and_maybe_reset(env.rand_action(td))  # starts the workers
        stepped, td = env.step_and_maybe_reset(env.rand_action(td))
        before = td.clone()
        with pytest.raises(WorkerError, match="worker 1"):
            env.step_and_maybe_reset(env.rand_action(td))
        assert "next" not in td.keys()
        assert_same_data(td.exclude("action"), before.exclude("action"))
        # with a "next" entry already there, it is the one kept
        stepped.set("marker", torch.ones(2))
        nxt = stepped["next"]
        with pytest.raises(WorkerError):
            env.step_and_maybe_reset(stepped)
        assert stepped["next"] is nxt
        assert env.reset()["observation"].eq(0).all()  # the workers keep running


def test_a_dead_worker_closes_the_env_and_keeps_the_callers_data():
    class Exit(CountingEnv):
        def _step(self, td):
            os._exit(3)

    env = ParallelEnv(2, [CountingEnv, Exit], mp_start_method="fork")
    td = env.rand_action(env.reset())  # the workers run
    with pytest.raises(WorkerError, match="died with exit code 3"):
        env.step_and_maybe_reset(td)
    assert "next" not in td.keys() and env.is_closed


def test_ctrl_c_during_the_overlapped_step_closes_the_env():
    entered = multiprocessing.get_context("fork").Event()

    class SignalThenHang(CountingEnv):
        def _step(self, td):
            self.steps = getattr(self, "steps", 0) + 1
            if self.steps > 1:
                entered.set()
                threading.Event().wait()
            return super()._step(td)

    env = ParallelEnv(1, SignalThenHang, mp_start_method="fork", step_timeout=30)
    _, td = env.step_and_maybe_reset(env.rand_action(env.reset()))  # the workers run
    pids = env.worker_pids
    main = threading.main_thread().ident

    def interrupt():
        if entered.wait(20):
            signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            env.step_and_maybe_reset(env.rand_action(td))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert env.is_closed and "next" not in td.keys()
    assert not any(os.path.exists(f"/proc/{p}/stat") and _running(p) for p in pids)


def _running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_other_tensordict_types_take_the_base_method():
    with ParallelEnv(2, CountingEnv, {"max_steps": 2}, mp_start_method="fork") as env:
        ref = SerialEnv(2, CountingEnv, {"max_steps": 2})
        td, td_ref = env.reset(), ref.reset()
        for _ in range(4):
            lazy = LazyStackedTensorDict.lazy_stack(list(env.rand_action(td).unbind(0)), 0)
            stepped, td = env.step_and_maybe_reset(lazy)
            stepped_ref, td_ref = ref.step_and_maybe_reset(
                td_ref.set("action", lazy["action"].clone())
            )
            assert_same_data(stepped["next"].to_tensordict(), stepped_ref["next"])
            assert_same_data(td.to_tensordict(), td_ref)
