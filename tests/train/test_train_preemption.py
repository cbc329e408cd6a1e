"""Preemption of a real ``tdrl train`` process: SIGTERM (what SLURM, Kubernetes and spot
instances send) and Ctrl-C finish the iteration, write a checkpoint and exit 0; ``--resume``
then continues exactly; a second Ctrl-C stops at once; a stop that overruns ``--stop-timeout``
exits anyway, leaving the previous checkpoint; worker processes survive the terminal's signal
until the parent is done and nothing is left behind.

The signals are sent once the run's files show it reached a given point (polled with a
deadline), never after a fixed sleep.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tdrl.train import latest_checkpoint, verify_checkpoint
from tdrl.train.cli import main

pytestmark = pytest.mark.timeout(180)

_ENV = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
_WALL_CLOCK = ("time", "fps")  # the only columns two runs cannot share


def _sets(*overrides):
    return [x for o in overrides for x in ("--set", o)]


def _start(argv):
    """``python -m tdrl ARGV`` in a process group of its own (a terminal's foreground job)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tdrl", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_ENV,
        start_new_session=True,
    )


def _until(predicate, proc, limit=90.0, what="the run to get there"):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended (code {proc.returncode}) before {what}:\n{err[-3000:]}")
        time.sleep(0.05)  # polling the run's files, with a deadline
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def _rows(run_dir):
    path = Path(run_dir) / "metrics.csv"
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _comparable(rows):
    return [{k: v for k, v in r.items() if k not in _WALL_CLOCK} for r in rows]


def _weights(run_dir):
    tensors = load_file(str(latest_checkpoint(run_dir) / "tensors.safetensors"))
    return {k: v for k, v in tensors.items() if k.startswith("module/")}


def _finish(proc, limit=90):
    out, err = proc.communicate(timeout=limit)
    return proc.returncode, out, err


def _budget(run_dir, frames, epochs=None):
    """Sets the frame budget (and PPO epochs) a ``--resume`` of ``run_dir`` trains with."""
    path = Path(run_dir) / "config.json"
    config = json.loads(path.read_text())
    config["frames"] = frames
    if epochs is not None:
        config["loss"]["epochs"] = epochs
    path.write_text(json.dumps(config))


def _no_leftovers(run_dir):
    names = [p.name for p in (Path(run_dir) / "checkpoints").iterdir()]
    assert not [n for n in names if n.startswith(".tmp-")], names


PPO = [
    "train",
    "ppo",
    "--frames",
    "3840",
    "--num-envs",
    "4",
    "--quiet",
    *_sets(
        "collector.frames_per_batch=128",
        "loss.epochs=4",
        "loss.minibatch_size=64",
        "model.hidden=[32]",
        "eval.every_frames=512",
        "eval.episodes=2",
        "logging.checkpoint_every_frames=1024",
    ),
]


def test_sigterm_checkpoints_exits_0_and_resume_matches_an_uninterrupted_run(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main([*PPO, "--out", str(whole)]) == 0
    proc = _start([*PPO, "--out", str(cut)])
    _until(lambda: len(_rows(cut)) >= 3, proc, what="3 metrics rows")
    proc.send_signal(signal.SIGTERM)
    code, _, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "SIGTERM received" in err and "stopped by SIGTERM at frame" in err
    assert not (cut / "summary.json").exists()  # the run is not over
    stopped_at = int(verify_checkpoint(latest_checkpoint(cut)).meta["frames"])
    assert 3 * 128 <= stopped_at < 3840
    assert int(_rows(cut)[-1]["frames"]) == stopped_at  # the iteration it was in was finished
    _no_leftovers(cut)
    assert main(["train", "--resume", str(cut), "--quiet"]) == 0
    assert _comparable(_rows(cut)) == _comparable(_rows(whole))  # no lost or repeated frames
    a, b = _weights(whole), _weights(cut)
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


SLOW_PPO = [
    "train",
    "ppo",
    "--frames",
    "100000",
    "--num-envs",
    "4",
    "--quiet",
    *_sets(
        "collector.frames_per_batch=128",
        "loss.minibatch_size=32",
        "model.hidden=[32]",
        "eval.every_frames=0",
        "eval.target_return=0",
        "logging.checkpoint_every_frames=128",
    ),
]


def test_a_second_ctrl_c_stops_at_once_without_a_new_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = _start([*SLOW_PPO, "--set", "loss.epochs=150", "--out", str(out)])
    _until(lambda: latest_checkpoint(out) is not None, proc, what="the first checkpoint")
    proc.send_signal(signal.SIGINT)
    _until(lambda: len(_rows(out)) >= 1, proc, what="a row")
    before = latest_checkpoint(out)
    # the first Ctrl-C's note is on stderr once the handler ran: then the second one
    line = ""
    deadline = time.monotonic() + 60
    while "SIGINT received" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    code, _, err = _finish(proc)
    assert code == 130, err[-3000:]
    assert time.monotonic() - start < 20  # at once: the update in progress was abandoned
    assert "second Ctrl-C: stopping at once" in err and "interrupted" in err
    assert latest_checkpoint(out) == before  # no new checkpoint; the kept one verifies
    verify_checkpoint(before)
    _no_leftovers(out)
    at = int(verify_checkpoint(before).meta["frames"])
    _budget(out, at + 128)
    assert main(["train", "--resume", str(out), "--quiet"]) == 0  # from the kept checkpoint
    assert [int(r["frames"]) for r in _rows(out)] == list(range(128, at + 129, 128))


def test_a_stop_that_overruns_the_stop_timeout_exits_124_keeping_the_last_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert main([*SLOW_PPO, "--frames", "128", "--set", "loss.epochs=1", "--out", str(out)]) == 0
    before = latest_checkpoint(out)
    _budget(out, 100_000, epochs=3000)  # now every update takes far longer than the limit
    proc = _start(["train", "--resume", str(out), "--quiet", "--stop-timeout", "1"])
    line, deadline = "", time.monotonic() + 90
    while "resuming from" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    # its first batch takes well under a second of CPU, its update minutes: past 2 s of CPU
    # time after the resume (read from /proc) it is inside the update
    cpu = _cpu_seconds(proc.pid)
    _until(lambda: _cpu_seconds(proc.pid) > cpu + 2.0, proc, what="2 s of CPU in the update")
    proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    code, _, err = _finish(proc)
    assert code == 124, err[-3000:]
    assert time.monotonic() - start < 20
    assert "did not finish within 1 s" in err and "previous one is intact" in err
    assert latest_checkpoint(out) == before
    verify_checkpoint(before)
    _no_leftovers(out)


def _cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _children(pid):
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def _ignored(pid):
    """The signals process ``pid`` ignores (its ``SigIgn`` mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(ln for ln in status.splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
    return {s for s in signal.Signals if mask >> (s - 1) & 1}


def _shm_names(pids):
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            if "/dev/shm/" in line and "(deleted)" not in line:
                names.add(line.split("/dev/shm/", 1)[1].strip())
    return names


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_whole_process_group_signalled_keeps_env_workers_until_the_checkpoint(tmp_path, sig):
    # Ctrl-C in a terminal signals the foreground process group; SLURM signals every process of
    # the job: the ParallelEnv workers get it too and must not die before the parent is done
    out = tmp_path / "run"
    argv = ["train", "dqn", "--frames", "100000", "--num-envs", "4", "--quiet", "--out", str(out)]
    argv += _sets(  # few updates: the run spends its time collecting, in the workers
        "env_processes=2",
        "collector.frames_per_batch=256",
        "collector.init_random_frames=64",
        "loss.updates_per_frame=0.01",
        "buffer.batch_size=16",
        "model.hidden=[16]",
        "eval.every_frames=0",
        "eval.episodes=2",
        "eval.target_return=0",
        "logging.checkpoint_every_frames=256",
    )
    proc = _start(argv)
    _until(lambda: latest_checkpoint(out) is not None, proc, what="the first checkpoint")
    workers = [w for w in _children(proc.pid) if "resource_tracker" not in _cmdline(w)]
    assert len(workers) == 2, workers
    for w in workers:  # what they do with the signals: ignore both
        assert _ignored(w) & {signal.SIGINT, signal.SIGTERM} == {signal.SIGINT, signal.SIGTERM}
    shm = _shm_names([proc.pid, *workers])
    os.killpg(proc.pid, sig)
    code, _, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert f"stopped by {sig.name}" in err and "WorkerError" not in err
    verify_checkpoint(latest_checkpoint(out))
    _no_leftovers(out)
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)]  # no stray worker
    assert not [n for n in shm if (Path("/dev/shm") / n).exists()]  # no shared memory left


def test_sigterm_stops_a_ray_run_with_a_checkpoint_and_it_resumes(ray_session, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "ppo", "--frames", "100000", "--num-envs", "2", "--quiet", "--out", str(out)]
    argv += _sets(
        "collector.frames_per_batch=64",
        "loss.epochs=2",
        "model.hidden=[16]",
        "eval.every_frames=0",
        "eval.episodes=1",
        "eval.target_return=0",
        "logging.checkpoint_every_frames=128",
    )
    proc = _start([*argv, "--ray", ray_session.address, "--num-collectors", "2"])
    _until(lambda: len(_rows(out)) >= 3, proc, what="3 metrics rows", limit=150)
    proc.send_signal(signal.SIGTERM)  # ray.init's own SIGTERM handler must not take it
    code, _, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "stopped by SIGTERM" in err
    stopped_at = int(verify_checkpoint(latest_checkpoint(out)).meta["frames"])
    frames = [int(r["frames"]) for r in _rows(out)]
    assert frames == list(range(64, stopped_at + 1, 64))
    resume = ["train", "--resume", str(out), "--quiet", "--ray", ray_session.address]
    resume += ["--num-collectors", "2"]
    _budget(out, stopped_at + 128)
    assert main(resume) == 0
    assert [int(r["frames"]) for r in _rows(out)] == list(range(64, stopped_at + 129, 64))


def test_ctrl_c_in_the_terminal_stops_a_run_on_its_own_local_ray(tmp_path):
    # the local Ray instance `tdrl train --ray` starts gets the terminal's SIGINT too
    out = tmp_path / "run"
    argv = ["train", "ppo", "--frames", "100000", "--num-envs", "2", "--quiet", "--out", str(out)]
    argv += _sets(
        "collector.frames_per_batch=64",
        "loss.epochs=2",
        "model.hidden=[16]",
        "eval.every_frames=0",
        "eval.episodes=1",
        "eval.target_return=0",
        "logging.checkpoint_every_frames=128",
    )
    proc = _start([*argv, "--ray", "--num-collectors", "1"])
    _until(lambda: len(_rows(out)) >= 3, proc, what="3 metrics rows", limit=150)
    os.killpg(proc.pid, signal.SIGINT)
    code, _, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "stopped by SIGINT" in err
    verify_checkpoint(latest_checkpoint(out))
    _no_leftovers(out)
