"""RunLock: one training process per run directory; a crashed holder does not leave it stuck.
Every case uses real processes (flock is per open file: threads would not show it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tdrl.train._lock import LOCK_FILE, RunLock, RunLockedError
from tdrl.train.cli import main

pytestmark = pytest.mark.timeout(60)

_HOLD = textwrap.dedent(
    """
    import sys
    from tdrl.train._lock import RunLock
    lock = RunLock(sys.argv[1]).acquire()
    print("HELD", flush=True)
    sys.stdin.readline()  # hold it until the test says so (or kills us)
    """
)


def _holder(run_dir):
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "HELD"
    return proc


def _wait_gone(proc):
    proc.wait(timeout=30)


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(RunLockedError, match=rf"in use by pid {holder.pid} on "):
            RunLock(tmp_path).acquire()
        record = json.loads((tmp_path / LOCK_FILE).read_text())
        assert record["pid"] == holder.pid and record["host"] and record["since"]
    finally:
        holder.stdin.close()
        _wait_gone(holder)
    with RunLock(tmp_path) as lock:  # released on exit: free again, and no note
        assert lock.held and lock.holder()["pid"] == os.getpid()
    assert (tmp_path / LOCK_FILE).read_text() == ""  # a released lock names nobody


def test_a_killed_holder_leaves_a_stale_lock_that_is_taken_over_with_a_note(tmp_path, capsys):
    holder = _holder(tmp_path)
    holder.send_signal(signal.SIGKILL)  # a crash: the process cannot release anything
    _wait_gone(holder)
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
    lock = RunLock(tmp_path).acquire()
    try:
        err = capsys.readouterr().err
        assert f"taking over the stale lock of {tmp_path}: pid {holder.pid}" in err
        assert "ended without releasing it" in err
        assert lock.holder()["pid"] == os.getpid()
    finally:
        lock.release()


def test_tdrl_train_resume_refuses_a_directory_another_process_trains_in(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "a2c", "--frames", "32", "--num-envs", "2", "--quiet", "--out", str(out)]
    args += ["--set", "collector.frames_per_batch=32", "--set", "eval.episodes=1"]
    assert main(args) == 0
    holder = _holder(out)  # e.g. a first `tdrl train --resume` still running
    try:
        start = time.monotonic()
        assert main(["train", "--resume", str(out), "--quiet"]) == 2
        assert time.monotonic() - start < 30
        err = capsys.readouterr().err
        assert f"tdrl train: error: tdrl train: the run directory {out} is in use by pid " in err
        assert f"pid {holder.pid}" in err
        # nothing of the run was touched: the refused process wrote no rows
        assert sum(1 for _ in (out / "metrics.csv").open()) == 2
    finally:
        holder.stdin.close()
        _wait_gone(holder)
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
