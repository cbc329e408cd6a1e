"""RunLock: one training process per run directory."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["LOCK_FILE", "RunLock", "RunLockedError"]

LOCK_FILE = "run.lock"


class RunLockedError(RuntimeError):
    """Another live process trains in the run directory."""


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ")"
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[19])  # field 22 of proc(5), counted from field 3
    except (IndexError, ValueError):
        return None


class RunLock:
    """An exclusive lock on a run directory, held while a trainer runs in it.

    The lock is ``fcntl.flock`` on ``<run dir>/run.lock``. The kernel releases a flock when
    its holder exits however it exits (a crash, ``kill -9``, a lost node's reboot), so a
    crashed holder never leaves the directory stuck: the lock *file* stays behind, but nobody
    holds it, and the next run takes it over with a note on stderr naming the previous holder.
    The file holds the holder's pid, host, process start time and the time it took the lock;
    a process refused the lock reads them for its error. The lock file descriptor is not
    inherited by programs the holder executes (``O_CLOEXEC``).

    ``flock`` coordinates processes of one machine, and of several machines on file systems
    that forward it (NFSv4, Lustre and GPFS with their lock services on). Where a file system
    does not, each machine only sees its own holders.

    Args:
        run_dir: the run directory (created if missing).
        where: the command or method named in messages.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with RunLock(d) as lock:
        ...         print(lock.holder()["pid"] == os.getpid())
        True
    """

    def __init__(self, run_dir: str | Path, *, where: str = "tdrl train") -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.where = where
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Takes the lock; returns ``self``.

        Raises:
            RunLockedError: another live process holds it (the message names its pid).
        """
        if self._fd is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise RunLockedError(self._held_message(holder)) from None
        except BaseException:
            os.close(fd)
            raise
        previous = _read(fd)
        if previous.get("pid") not in (None, os.getpid()):
            print(
                f"{self.where}: taking over the stale lock of {self.path.parent}: pid "
                f"{previous.get('pid')} on {previous.get('host')} {_fate(previous)}",
                file=sys.stderr,
                flush=True,
            )
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "start_ticks": _start_time(os.getpid()),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def _held_message(self, holder: dict[str, Any]) -> str:
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        since = holder.get("since", "?")
        return (
            f"{self.where}: the run directory {self.path.parent} is in use by pid {pid} on "
            f"{host} (since {since}) (got a lock held on {self.path}; expected no other "
            "process training there). Wait for that run to end or stop it (kill -TERM "
            f"{pid} saves a checkpoint), or pass another --out directory."
        )

    def holder(self) -> dict[str, Any]:
        """What the lock file says about its holder (pid, host, start_ticks, since)."""
        try:
            with open(self.path, "rb") as f:
                return _parse(f.read())
        except OSError:
            return {}

    def release(self) -> None:
        """Releases the lock (idempotent). The file stays: removing it could let two
        processes lock two different files of the same name."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):  # an empty file: released, not abandoned
                os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _fate(record: dict[str, Any]) -> str:
    """How the recorded holder ended, as far as this machine can tell."""
    ended = "ended without releasing it"
    if record.get("host") != socket.gethostname():
        return ended
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return ended
    now = _start_time(pid)
    if now is None:
        return f"{ended} (no such process now)"
    if record.get("start_ticks") not in (None, now):
        return f"{ended} (its pid now belongs to another process)"
    return "no longer holds it"


def _read(fd: int) -> dict[str, Any]:
    try:
        return _parse(os.pread(fd, 4096, 0))
    except OSError:
        return {}


def _parse(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8", "replace") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
