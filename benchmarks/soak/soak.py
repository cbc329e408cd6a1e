"""Soak: a long ``tdrl train`` run watched for leaks.

Trains the DQN preset (a replay buffer, a ``ParallelEnv`` of 2 worker processes, a checkpoint
every few seconds, periodic evaluations) for a stated time, sampling every few seconds:

- ``rss_mb``: resident memory of the trainer and its worker processes together;
- ``fds``: their open file descriptors; ``threads``: their threads;
- ``shm``: the ``/dev/shm`` entries they hold (mapped or open; ``/dev/shm`` itself is shared by
  every process of the machine, so its total count is recorded apart as ``shm_total``);
- ``ckpt_mb``: the size of the complete checkpoints kept (``ckpt-*``; the replay buffer
  fills during the warm-up, after which the kept checkpoints have a constant size);
- ``frames`` and ``checkpoints`` written, for the rates.

The first ``warmup`` fraction of the samples is left out (imports, the buffer filling, the
allocator settling); over the rest the run fails when RSS grows faster than ``max_rss_mb_per_h``
(a least-squares slope) or when fds, threads, shm entries or the checkpoint size end higher
than they were at the end of the warm-up (by more than the tolerance of a write in progress).
The run ends with SIGTERM, which must stop it with a complete checkpoint and exit code 0.

Usage::

    nice -n 19 .venv/bin/python benchmarks/soak/soak.py --minutes 10 --out /tmp/soak
    nice -n 19 .venv/bin/python benchmarks/soak/soak.py --minutes 240 --out /tmp/soak-4h

It prints one line per sample, writes ``samples.csv`` and ``result.json`` into ``--out`` and
exits 1 when a bound is broken.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

_SHM = Path("/dev/shm")
COLUMNS = ["t", "rss_mb", "fds", "threads", "shm", "shm_total", "ckpt_mb", "frames", "checkpoints"]


@dataclass
class Bounds:
    """What the soak accepts over the samples after the warm-up."""

    max_rss_mb_per_h: float = 50.0  # least-squares slope of the tree's RSS
    fd_slack: int = 4  # fds a checkpoint write or an evaluation holds for a moment
    thread_slack: int = 2
    ckpt_slack: float = 0.05  # relative growth of the kept checkpoints' size
    warmup: float = 0.25  # fraction of the run left out


@dataclass
class SoakResult:
    """The figures of a soak run and the bounds it broke (none: it passed)."""

    seconds: float
    samples: int
    frames: int
    checkpoints: int
    exit_code: int | None
    rss_mb_start: float
    rss_mb_end: float
    rss_mb_per_h: float
    fds: tuple[int, int]
    threads: tuple[int, int]
    shm: tuple[int, int]
    ckpt_mb: tuple[float, float]
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def _status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _shm_held(pid: int) -> set[str]:
    held = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("/dev/shm/"):
                held.add(target.split(" (deleted)")[0])
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if "/dev/shm/" in line:
                held.add("/dev/shm/" + line.split("/dev/shm/", 1)[1].split(" (deleted)")[0])
    except OSError:
        pass
    return held


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _ckpt_mb(run_dir: Path) -> float:
    """The size of the kept ``ckpt-*`` folders (a folder pruned while it is walked counts
    for what was read of it)."""
    total = 0
    for ckpt in (run_dir / "checkpoints").glob("ckpt-*"):
        for folder, _, files in os.walk(ckpt):  # os.walk ignores folders that vanish
            for name in files:
                try:
                    total += os.stat(os.path.join(folder, name)).st_size
                except OSError:
                    pass
    return total / 2**20


def _last_frames(run_dir: Path) -> int:
    """The frames of the newest complete row of ``metrics.csv`` (a row being written is
    skipped)."""
    try:
        with (run_dir / "metrics.csv").open() as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return 0
    for row in reversed(rows):
        try:
            return int(row["frames"])
        except (KeyError, TypeError, ValueError):
            continue
    return 0


def sample(pid: int, run_dir: Path, t: float, written: int) -> dict[str, float]:
    """One row of the soak's measurements (see the module docs)."""
    pids = _tree(pid)
    statuses = [_status(p) for p in pids]
    rss_kb = sum(int(s.get("VmRSS", "0 kB").split()[0]) for s in statuses)
    shm: set[str] = set()
    for p in pids:
        shm |= _shm_held(p)
    try:
        shm_total = len(os.listdir(_SHM))
    except OSError:
        shm_total = 0
    return {
        "t": round(t, 2),
        "rss_mb": round(rss_kb / 1024, 2),
        "fds": sum(_fd_count(p) for p in pids),
        "threads": sum(int(s.get("Threads", "0")) for s in statuses),
        "shm": len(shm),
        "shm_total": shm_total,
        "ckpt_mb": round(_ckpt_mb(run_dir), 3),
        "frames": _last_frames(run_dir),
        "checkpoints": written,
    }


def _slope_per_hour(ts: list[float], ys: list[float]) -> float:
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var * 3600.0


def judge(rows: list[dict[str, float]], bounds: Bounds, exit_code: int | None) -> SoakResult:
    """Checks the samples against ``bounds`` (after the warm-up)."""
    rest = rows[int(len(rows) * bounds.warmup) :] or rows
    first, last = rest[0], rest[-1]
    slope = _slope_per_hour([r["t"] for r in rest], [r["rss_mb"] for r in rest])
    result = SoakResult(
        seconds=rows[-1]["t"],
        samples=len(rows),
        frames=int(rows[-1]["frames"]),
        checkpoints=int(rows[-1]["checkpoints"]),
        exit_code=exit_code,
        rss_mb_start=first["rss_mb"],
        rss_mb_end=last["rss_mb"],
        rss_mb_per_h=round(slope, 2),
        fds=(int(first["fds"]), int(last["fds"])),
        threads=(int(first["threads"]), int(last["threads"])),
        shm=(int(first["shm"]), int(last["shm"])),
        ckpt_mb=(first["ckpt_mb"], last["ckpt_mb"]),
    )
    if slope > bounds.max_rss_mb_per_h:
        result.failures.append(
            f"RSS grows {slope:.1f} MB/h after the warm-up (bound {bounds.max_rss_mb_per_h})"
        )
    # the level at the start of the measured part against the lowest of the last quarter:
    # a leak raises even the lowest sample; a write in progress only raises some
    tail = rest[-max(len(rest) // 4, 1) :]
    for key, slack in (("fds", bounds.fd_slack), ("threads", bounds.thread_slack), ("shm", 0)):
        low = min(r[key] for r in tail)
        if low > first[key] + slack:
            result.failures.append(f"{key} grew from {first[key]} to at least {low}")
    ckpt_low = min(r["ckpt_mb"] for r in tail)
    if ckpt_low > first["ckpt_mb"] * (1 + bounds.ckpt_slack) + 0.01:
        result.failures.append(f"checkpoints grew from {first['ckpt_mb']} to {ckpt_low} MB")
    if exit_code != 0:
        result.failures.append(f"the run did not stop cleanly on SIGTERM (exit code {exit_code})")
    return result


def train_argv(
    out: Path, checkpoint_frames: int, capacity: int = 4096, python: str = sys.executable
) -> list[str]:
    """The soaked command: the DQN preset with a replay buffer, 2 env processes, frequent
    checkpoints and evaluations, and a budget it never reaches."""
    sets = [
        "env_processes=2",
        "collector.frames_per_batch=256",
        "collector.init_random_frames=512",
        "loss.updates_per_frame=0.125",
        f"buffer.capacity={capacity}",  # full within the warm-up: then checkpoints keep one size
        "model.hidden=[64, 64]",
        "eval.every_frames=8192",
        "eval.episodes=2",
        "eval.target_return=0",
        f"logging.checkpoint_every_frames={checkpoint_frames}",
    ]
    argv = [python, "-m", "tdrl", "train", "dqn", "--frames", str(10**12), "--num-envs", "8"]
    argv += ["--quiet", "--out", str(out / "run")]
    return argv + [x for s in sets for x in ("--set", s)]


def run_soak(
    seconds: float,
    out: str | Path,
    *,
    every: float = 5.0,
    checkpoint_frames: int = 2048,
    capacity: int = 4096,
    bounds: Bounds | None = None,
    echo: bool = True,
    startup_timeout: float = 300.0,
) -> SoakResult:
    """Runs the soak for ``seconds`` from its first batch (sampling every ``every`` s) and
    judges it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = (out / "train.log").open("w")
    proc = subprocess.Popen(
        train_argv(out, checkpoint_frames, capacity),
        stdout=log,
        stderr=log,
        env=env,
        start_new_session=True,
    )
    rows: list[dict[str, float]] = []
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + startup_timeout
        while not (run_dir / "metrics.csv").exists():  # imports, worker processes, first batch
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"soak: training did not start (see {out / 'train.log'})")
            time.sleep(0.2)
        start = time.monotonic()  # the stated time counts from the first batch
        while (t := time.monotonic() - start) < seconds and proc.poll() is None:
            root = run_dir / "checkpoints"
            if root.is_dir():
                seen |= {p.name for p in root.glob("ckpt-*")}
            rows.append(sample(proc.pid, run_dir, t, len(seen)))
            if echo:
                print(" ".join(f"{k}={rows[-1][k]}" for k in COLUMNS), flush=True)
            time.sleep(max(0.0, every - (time.monotonic() - start - t)))
        code = proc.poll()
        if code is None:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    with (out / "samples.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    if not rows:
        raise RuntimeError(f"soak: no sample taken (see {out / 'train.log'})")
    result = judge(rows, bounds or Bounds(), code)
    (out / "result.json").write_text(json.dumps(asdict(result), indent=2))
    return result


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the soak's clean-up (its run in its own session) runs


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="run time (default 10)")
    parser.add_argument("--out", required=True, help="folder for the run and the samples")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--checkpoint-frames", type=int, default=2048, help="frames between checkpoints"
    )
    parser.add_argument("--max-rss-mb-per-h", type=float, default=Bounds.max_rss_mb_per_h)
    args = parser.parse_args(argv)
    bounds = Bounds(max_rss_mb_per_h=args.max_rss_mb_per_h)
    result = run_soak(
        args.minutes * 60,
        args.out,
        every=args.every,
        checkpoint_frames=args.checkpoint_frames,
        bounds=bounds,
    )
    print(json.dumps(asdict(result), indent=2))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
