"""ParallelEnv reliability: failing, dying and hung workers, close, exit and parent death."""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tdrl.envs.batched import ParallelEnv
from tdrl.envs.builtin import CartPoleEnv
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv, FailingEnv, NestedCountingEnv

pytestmark = pytest.mark.timeout(60)


def _exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _exited(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper that is not us."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class _Exit(CountingEnv):
    def _step(self, td):
        os._exit(3)


class _Segfault(CountingEnv):
    def _step(self, td):
        faulthandler.disable()  # keep the test output free of the crash dump
        os.kill(os.getpid(), signal.SIGSEGV)
        return super()._step(td)


class _Hang(CountingEnv):
    def _step(self, td):
        threading.Event().wait()


_PARENT = os.getpid()


class _HangOnClose(CountingEnv):
    def _close(self):
        if os.getpid() != _PARENT:  # the parent builds one to read the specs: hang in workers
            threading.Event().wait()


def test_env_exception_names_worker_type_message_and_traceback():
    with ParallelEnv(
        2, [CountingEnv, FailingEnv], [{}, {"fail_after": 1}], mp_start_method="fork"
    ) as env:
        td = env.step_mdp(env.step(env.rand_action(env.reset())))
        start = time.monotonic()
        with pytest.raises(WorkerError) as info:
            env.step(env.rand_action(td))
        assert time.monotonic() - start < 5
        msg = str(info.value)
        assert (
            "worker 1 (pid" in msg and "RuntimeError: FailingEnv._step: failing on purpose" in msg
        )
        assert "remote traceback" in msg and "_mock_envs.py" in msg
        assert isinstance(info.value.__cause__, RuntimeError)
        # the workers keep running
        assert env.reset()["observation"].eq(0).all()


@pytest.mark.parametrize(
    ("cls", "expected"),
    [(_Exit, "exit code 3"), (_Segfault, "signal SIGSEGV"), (None, "signal SIGKILL")],
    ids=["os._exit", "segfault", "sigkill"],
)
def test_dead_worker_is_reported_with_pid_and_exit_status(cls, expected):
    env = ParallelEnv(2, [CountingEnv, cls or CountingEnv], mp_start_method="fork")
    td = env.rand_action(env.reset())
    pids = env.worker_pids
    if cls is None:
        os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=rf"worker 1 \(pid {pids[1]}\) died with {expected}"):
        env.step(td)
    assert time.monotonic() - start < 5
    assert env.is_closed and not any(_exists(p) for p in pids)
    with pytest.raises(RuntimeError, match="closed after a failure"):
        env.reset()


def test_a_death_is_reported_while_another_worker_is_still_working():
    # the answers are read one worker after the other: waiting for worker 0 (hung here) must
    # still wake up at once when worker 1 dies
    env = ParallelEnv(2, [_Hang, _Exit], mp_start_method="fork", step_timeout=30)
    td = env.rand_action(env.reset())
    pids = env.worker_pids
    start = time.monotonic()
    with pytest.raises(WorkerError, match=rf"worker 1 \(pid {pids[1]}\) died with exit code 3"):
        env.step(td)
    assert time.monotonic() - start < 5
    assert env.is_closed and not any(_exists(p) for p in pids)


def test_every_hung_worker_is_named_in_the_timeout():
    env = ParallelEnv(3, [_Hang, CountingEnv, _Hang], mp_start_method="fork", step_timeout=0.5)
    td = env.rand_action(env.reset())
    pids = env.worker_pids
    with pytest.raises(TimeoutError) as info:
        env.step(td)
    msg = str(info.value)
    assert f"worker 0 (pid {pids[0]}), worker 2 (pid {pids[2]}) did not answer" in msg
    assert f"worker 1 (pid {pids[1]})" not in msg
    assert not any(_exists(p) for p in pids)


def test_hung_worker_times_out_and_is_killed():
    env = ParallelEnv(2, [CountingEnv, _Hang], mp_start_method="fork", step_timeout=0.5)
    td = env.rand_action(env.reset())
    pids = env.worker_pids
    start = time.monotonic()
    with pytest.raises(
        TimeoutError, match=rf"worker 1 \(pid {pids[1]}\) did not answer within 0.5"
    ):
        env.step(td)
    assert time.monotonic() - start < 5
    assert not any(_exists(p) for p in pids)


@pytest.mark.parametrize("method", ["step", "step_and_maybe_reset"])
def test_ctrl_c_while_waiting_closes_the_env(method):
    entered = multiprocessing.get_context("fork").Event()

    class SignalThenHang(CountingEnv):
        def _step(self, td):
            entered.set()
            threading.Event().wait()

    env = ParallelEnv(1, SignalThenHang, mp_start_method="fork", step_timeout=30)
    td = env.rand_action(env.reset())
    pids = env.worker_pids
    main = threading.main_thread().ident

    def interrupt():
        if entered.wait(20):
            signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]

    # A shell that starts the tests in the background ignores SIGINT; Python then keeps SIG_IGN
    # and Ctrl-C would never become a KeyboardInterrupt. Install Python's handler explicitly.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            getattr(env, method)(td)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert env.is_closed and not any(_exists(p) for p in pids)
    assert "next" not in td.keys()  # the caller's data is as it was


def _torch_shm() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("torch_")}


@pytest.mark.parametrize(
    ("make", "kwargs"),
    [(NestedCountingEnv, {"batch_size": (2,)}), (CartPoleEnv, {})],
    ids=["nested", "discrete-actions"],  # the second reads the action-mask flags every step
)
def test_close_is_idempotent_and_leaves_nothing_behind(make, kwargs):
    gc.collect()
    shm_before, fds_before = _torch_shm(), len(os.listdir("/proc/self/fd"))
    env = ParallelEnv(2, make, kwargs, mp_start_method="fork")
    env.rollout(3)
    pids = env.worker_pids
    env.close()
    env.close()
    assert not any(_exists(p) for p in pids)  # exited and reaped: no zombie
    assert _torch_shm() <= shm_before
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= fds_before
    with ParallelEnv(2, CountingEnv, mp_start_method="fork") as again:
        assert again.rollout(2).batch_size == (2, 2)


def test_close_is_bounded_when_a_worker_hangs_in_close():
    env = ParallelEnv(2, [CountingEnv, _HangOnClose], mp_start_method="fork", shutdown_timeout=0.5)
    env.reset()
    pids = env.worker_pids
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < 4
    assert not any(_exists(p) for p in pids)


def test_del_and_context_manager_close_the_workers():
    env = ParallelEnv(1, CountingEnv, mp_start_method="fork")
    env.reset()
    pids = env.worker_pids
    del env
    gc.collect()
    assert not any(_exists(p) for p in pids)
    with ParallelEnv(1, CountingEnv, mp_start_method="fork") as env:
        env.reset()
        pids = env.worker_pids
    assert env.is_closed and not any(_exists(p) for p in pids)


_SCRIPT_HEAD = """
import multiprocessing, sys, threading
from tdrl.envs.batched import ParallelEnv
from tdrl.envs.builtin import CartPoleEnv
from tdrl.testing import CountingEnv

class Hang(CountingEnv):
    def _step(self, td):
        threading.Event().wait()
"""


def _python(body: str) -> list[str]:
    return [sys.executable, "-c", _SCRIPT_HEAD + textwrap.dedent(body)]


@pytest.mark.timeout(120)
def test_interpreter_exit_closes_unclosed_envs_and_keeps_the_start_method():
    body = """
    if __name__ == "__main__":
        env = ParallelEnv(2, CountingEnv, mp_start_method="fork")
        env.reset()
        print(*env.worker_pids, multiprocessing.get_start_method(allow_none=True), flush=True)
    """
    out = subprocess.run(_python(body), capture_output=True, text=True, timeout=100, check=True)
    *pids, method = out.stdout.split()
    assert method == "None"  # using tdrl never sets the global start method
    assert not any(_exists(int(p)) for p in pids)


@pytest.mark.timeout(120)
def test_workers_exit_when_the_parent_is_killed():
    # Started from a thread, so PR_SET_PDEATHSIG is off and the watchdog thread must act; worker
    # 1 is hung in a step, and under fork the siblings hold each other's pipes open.
    body = """
    if __name__ == "__main__":
        env = ParallelEnv(2, [CountingEnv, Hang], mp_start_method="fork", step_timeout=600)
        t = threading.Thread(target=env.start)
        t.start()
        t.join()
        print(*env.worker_pids, flush=True)
        env.step(env.rand_action(env.reset()))
    """
    proc = subprocess.Popen(_python(body), stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) == 2
    finally:
        proc.kill()
        proc.wait()
    assert _wait_for(lambda: all(_exited(p) for p in pids), timeout=10)
