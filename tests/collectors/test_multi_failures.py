"""Multi-process collectors: failing, dying and hung workers, shutdown and parent death."""

from __future__ import annotations

import gc
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tdrl.collectors import MultiAsyncCollector, MultiCollectorOptions, MultiSyncCollector
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv, FailingEnv

pytestmark = pytest.mark.timeout(60)


def _all_exit(pids: list[int], timeout: float) -> bool:
    """Waits (on pidfds, no polling) until every process has ended; zombies count as ended."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            left = max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return False
        finally:
            os.close(fd)
    return True


class _Hang(CountingEnv):
    """Hangs at its third step (the dry run at start takes one)."""

    steps = 0

    def _step(self, td):
        self.steps += 1
        if self.steps == 3:
            threading.Event().wait()
        return super()._step(td)


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_env_exception_names_the_worker_with_its_traceback(cls):
    fns = [CountingEnv, lambda: FailingEnv(fail_after=5)]
    options = MultiCollectorOptions(batch_timeout=10.0)
    with cls(fns, frames_per_batch=4, mp_start_method="fork", options=options) as collector:
        with pytest.raises(WorkerError, match="worker 1") as info:
            for _ in collector:
                pass
        assert "failing on purpose" in str(info.value) and "Traceback" in str(info.value)
        assert isinstance(info.value.__cause__, RuntimeError)
        # the workers live on and answer other commands (nothing is left waiting for them)
        start = time.monotonic()
        assert collector.set_seed(0) == FailingEnv(fail_after=5).set_seed(CountingEnv().set_seed(0))
        assert time.monotonic() - start < 5
        pids = collector.worker_pids
    assert _all_exit(pids, timeout=5)


def test_a_factory_that_raises_fails_the_start_and_cleans_up():
    def broken():
        raise ValueError("no env today")

    with pytest.raises(WorkerError, match=r"worker 1.*no env today"):
        MultiSyncCollector([CountingEnv, broken], frames_per_batch=2, mp_start_method="fork")


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_a_killed_worker_is_reported_within_seconds(cls):
    collector = cls([CountingEnv] * 2, frames_per_batch=2, mp_start_method="fork")
    it = iter(collector)
    next(it)
    pids = collector.worker_pids
    os.kill(pids[1], signal.SIGKILL)
    assert _all_exit(pids[1:], timeout=10)  # a loaded machine may take a while to end it
    start = time.monotonic()
    with pytest.raises(WorkerError, match=rf"worker 1 \(pid {pids[1]}\) died with signal SIGKILL"):
        next(it)
    assert time.monotonic() - start < 5
    assert _all_exit(pids, timeout=5)
    with pytest.raises(RuntimeError, match="shut down"):
        collector.set_seed(0)
    collector.shutdown()


def test_a_hung_worker_times_out_and_is_killed():
    collector = MultiSyncCollector(
        [CountingEnv, _Hang],
        frames_per_batch=4,
        mp_start_method="fork",
        options=MultiCollectorOptions(start_timeout=1.0, batch_timeout=1.0),
    )
    pids = collector.worker_pids
    with pytest.raises(TimeoutError, match="worker 1"):
        next(iter(collector))
    assert _all_exit(pids, timeout=5)


def test_shutdown_is_idempotent_and_del_cleans_up():
    collector = MultiAsyncCollector([CountingEnv] * 2, frames_per_batch=2, mp_start_method="fork")
    next(iter(collector))  # one worker is still collecting
    pids = collector.worker_pids
    collector.shutdown()
    collector.shutdown()
    assert _all_exit(pids, timeout=1)
    collector = MultiSyncCollector([CountingEnv], frames_per_batch=2, mp_start_method="fork")
    pids = collector.worker_pids
    del collector
    gc.collect()
    assert _all_exit(pids, timeout=5)


@pytest.mark.timeout(120)
def test_workers_exit_when_the_parent_is_killed():
    body = """
    import os, signal
    from tdrl.collectors import MultiSyncCollector
    from tdrl.testing import CountingEnv
    if __name__ == "__main__":
        collector = MultiSyncCollector([CountingEnv] * 2, frames_per_batch=2, mp_start_method="fork")
        next(iter(collector))
        print(*collector.worker_pids, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
    cmd = [sys.executable, "-c", textwrap.dedent(body)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2, out.stderr
    assert _all_exit(pids, timeout=10)
