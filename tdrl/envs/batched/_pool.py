"""WorkerPool: starts, commands, watches and shuts down worker processes (of a ParallelEnv, of
the multi-process collectors).

Every wait is bounded: the parent blocks in ``poll`` on one worker's pipe (the answers are read
one worker after the other) and on every process sentinel, so it wakes up as soon as that worker
answers or any worker dies, and gives up after the timeout. Pools still running at interpreter
exit are shut down.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing import connection
from multiprocessing.context import BaseContext
from typing import Any, NoReturn

from tdrl.envs.batched._process import (
    FRAMED_REPLIES,
    RemoteError,
    WorkerOptions,
    decode_reply,
    describe_exit,
    encode_command,
    framed_command,
    worker_names,
)
from tdrl.envs.batched._waiter import Waiter
from tdrl.envs.batched._wire import Wire
from tdrl.errors import WorkerError

__all__ = ["WorkerPool"]

_LIVE: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
_ATEXIT_LOCK = threading.Lock()
_atexit_registered = False


def _shutdown_live_pools() -> None:
    # Runs before multiprocessing's own exit handler (atexit is LIFO and this is registered
    # later), which would otherwise wait forever on our non-daemonic workers.
    for pool in list(_LIVE):
        try:
            pool.shutdown()
        except Exception:
            pass


def _track(pool: WorkerPool) -> None:
    global _atexit_registered
    with _ATEXIT_LOCK:
        if not _atexit_registered:
            atexit.register(_shutdown_live_pools)
            _atexit_registered = True
        _LIVE.add(pool)


class WorkerPool:
    """A set of worker processes that serve commands (not thread-safe: one caller at a time).

    Args:
        owner: the owner's class name, for messages.
        ctx: the multiprocessing context (start method).
        num_threads: torch threads per worker.
        step_timeout: seconds to wait for an answer to a command.
        start_timeout: seconds to wait for the workers to start and report.
        shutdown_timeout: seconds ``shutdown`` waits for a clean exit before killing.
        timeout_hint: the end of the timeout message, how to fix it (e.g. "Raise step_timeout
            if the env is just slow.").
    """

    def __init__(
        self,
        owner: str,
        ctx: BaseContext,
        *,
        num_threads: int,
        step_timeout: float,
        start_timeout: float,
        shutdown_timeout: float,
        timeout_hint: str,
    ) -> None:
        self.owner = owner
        self.step_timeout = step_timeout
        self.start_timeout = start_timeout
        self.shutdown_timeout = shutdown_timeout
        self.timeout_hint = timeout_hint
        self.failure: str | None = None
        self._ctx = ctx
        self._num_threads = num_threads
        self._args: list[tuple] = []
        self._procs: list[Any] = []
        self._pids: list[int] = []
        self._conns: list[Any] = []
        self._wires: list[Wire] = []
        self._fds: list[int] = []
        self._fd_worker: dict[int, int] = {}
        self._sentinel_worker: dict[int, int] = {}
        self._waiter: Waiter | None = None
        self._owner_pid = os.getpid()
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """The worker pids (empty before ``start``)."""
        return list(self._pids)

    # ------------------------------------------------------------------ start
    def start(self, target: Callable[..., None], args: Sequence[tuple]) -> list[Any]:
        """Starts one worker per entry of ``args`` and returns the value each one reports.

        Worker ``i`` runs ``target(i, conn, options, *args[i])`` (``options`` a
        :class:`WorkerOptions`); it is expected to call :func:`run_worker`. The arguments stay
        referenced until ``shutdown``.
        """
        options = WorkerOptions(
            num_threads=self._num_threads,
            parent_pid=os.getpid(),
            pdeathsig=threading.current_thread() is threading.main_thread(),
        )
        self._args = list(args)
        _track(self)
        try:
            for i, extra in enumerate(self._args):
                parent_conn, child_conn = self._ctx.Pipe()
                proc = self._ctx.Process(  # type: ignore[attr-defined]
                    target=target,
                    args=(i, child_conn, options, *extra),
                    name=f"tdrl-{self.owner}-worker-{i}",
                    daemon=False,
                )
                self._procs.append(proc)
                self._conns.append(parent_conn)
                self._wires.append(Wire(parent_conn))
                proc.start()
                self._pids.append(proc.pid)
                child_conn.close()
        except BaseException:
            self.shutdown()
            raise
        self._fds = [conn.fileno() for conn in self._conns]
        for i, (proc, fd) in enumerate(zip(self._procs, self._fds)):
            self._fd_worker[fd] = i
            self._sentinel_worker[proc.sentinel] = i
        self._waiter = Waiter(self._fds, list(self._sentinel_worker))
        return self._collect(range(len(self._procs)), "start", self.start_timeout)

    # ------------------------------------------------------------------ commands
    def run(self, cmd: str, args: tuple, workers: Sequence[int]) -> list[Any]:
        """Sends ``cmd`` to ``workers`` and returns their results in the same order.

        Raises:
            WorkerError: a worker raised (its env stays alive) or died (the pool shuts down).
            TimeoutError: a worker did not answer within ``step_timeout`` (the pool shuts down).
        """
        try:
            self._send_all(cmd, args, workers)
            return self._collect(workers, cmd, self.step_timeout)
        except (KeyboardInterrupt, SystemExit):
            self.abandon(cmd)
            raise

    def begin(self, cmd: str, args: tuple, workers: Sequence[int]) -> None:
        """The first half of ``run``: sends ``cmd`` to ``workers``. ``finish`` must follow (or
        ``abandon``, when the caller cannot wait for the answers).

        Raises:
            WorkerError: a worker died (the pool shuts down).
        """
        try:
            self._send_all(cmd, args, workers)
        except (KeyboardInterrupt, SystemExit):
            self.abandon(cmd)
            raise

    def finish(self, cmd: str, workers: Sequence[int]) -> list[Any]:
        """The second half of ``run``: the answers of ``workers`` to ``cmd``, in order."""
        try:
            return self._collect(workers, cmd, self.step_timeout)
        except (KeyboardInterrupt, SystemExit):
            self.abandon(cmd)
            raise

    def abandon(self, cmd: str) -> None:
        """Shuts the pool down while answers to ``cmd`` may still be on their way (Ctrl-C): the
        pipes are out of step. Idempotent."""
        if self.failure is None:
            self.failure = f"interrupted while waiting for the workers to answer {cmd!r}"
        self.shutdown(timeout=min(self.shutdown_timeout, 2.0))

    def _send_all(self, cmd: str, args: tuple, workers: Sequence[int]) -> None:
        self._check_open(cmd)
        msg = framed_command(cmd, args)
        wires = self._wires
        for w in workers:
            try:
                wires[w].send_frame(msg)
            except OSError:
                self._died(w, cmd)

    def _check_open(self, cmd: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"{self.owner}.{cmd}: the worker pool is shut down (got a command after "
                f"shutdown; expected none). Build a new {self.owner}."
            )

    def send(self, worker: int, cmd: str, args: tuple, *, share: bool = False) -> None:
        """Sends one command to one worker (per-worker arguments); ``gather`` the answers.

        ``share=True`` passes tensors in shared memory as handles to the same memory.

        Raises:
            WorkerError: the worker died (the pool shuts down).
        """
        self._check_open(cmd)
        try:
            self._wires[worker].send(encode_command(cmd, args, share=share))
        except OSError:
            self._died(worker, cmd)

    def gather(self, workers: Sequence[int], cmd: str) -> list[Any]:
        """Waits for the answers of ``workers`` to the ``cmd`` they were sent (as ``run``)."""
        return self._collect(workers, cmd, self.step_timeout)

    def wait_any(self, workers: Sequence[int], cmd: str) -> tuple[int, bool, Any]:
        """Waits for the first of ``workers`` to answer ``cmd``; returns ``(worker, ok, value)``
        (``value`` is a ``RemoteError`` when not ok: pass it to :meth:`raise_remote`).

        Raises:
            WorkerError: a worker died (checked before the answers: a live worker's answers
                must not hide a dead one). TimeoutError: none answered within ``step_timeout``.
        """
        slots = {self._fds[w]: w for w in workers}
        deadline = time.monotonic() + self.step_timeout
        assert self._waiter is not None
        while True:
            ready = self._waiter.wait(deadline - time.monotonic())
            if not ready:
                if time.monotonic() >= deadline:
                    self._timed_out(list(workers), cmd, self.step_timeout)
                continue
            for fd in ready:
                w = self._sentinel_worker.get(fd)
                if w is not None:
                    self._died(w, cmd)
            for fd in ready:
                w = slots.get(fd)
                if w is not None:
                    ok, value = self._read(w, cmd)
                    return w, ok, value
            # a pipe of a worker nobody waits for is readable: it can only have closed
            self._died(self._fd_worker[ready[0]], cmd)

    def raise_remote(self, worker: int, error: RemoteError, cmd: str) -> NoReturn:
        """Raises the ``WorkerError`` of an error answer (see ``wait_any``)."""
        self._raise_remote([(worker, error)], cmd)

    def _collect(self, workers: Sequence[int], cmd: str, timeout: float) -> list[Any]:
        """The answers of ``workers``, read one worker after the other (see ``Waiter``)."""
        results: list[Any] = [None] * len(workers)
        errors: list[tuple[int, RemoteError]] = []
        early: dict[int, tuple[bool, Any]] = {}  # answers of workers that ended after them
        deadline = time.monotonic() + timeout
        for k, w in enumerate(workers):
            reply = early.pop(w, None) if early else None
            if reply is None:
                reply = self._answer(workers, k, early, deadline, cmd, timeout)
            ok, value = reply
            if ok:
                results[k] = value
            else:
                errors.append((w, value))
        if errors:
            self._raise_remote(errors, cmd)
        return results

    def _answer(
        self,
        workers: Sequence[int],
        k: int,
        early: dict[int, tuple[bool, Any]],
        deadline: float,
        cmd: str,
        timeout: float,
    ) -> tuple[bool, Any]:
        """The answer of ``workers[k]``; a process that ends meanwhile is a death, unless its
        answer to this command is read or waiting in its pipe (then it goes to ``early``)."""
        w, waiter = workers[k], self._waiter
        fd = self._fds[w]
        assert waiter is not None
        poller = waiter.poller(w)
        if poller is not None:  # the usual case, in the fewest calls: w answers
            ready = poller.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000)))
            if len(ready) == 1 and ready[0][0] == fd:
                return self._read(w, cmd)
        while True:
            ready = waiter.wait_for(w, deadline - time.monotonic())
            if not ready:
                if time.monotonic() >= deadline:  # those whose answer is not in their pipe
                    pending = workers[k + 1 :]
                    late = [w, *(v for v in pending if v not in early and not self._polled(v))]
                    self._timed_out(late, cmd, timeout)
                continue
            reply = self._read(w, cmd) if fd in ready else None
            for sentinel in ready:
                d = self._sentinel_worker.get(sentinel)
                if d is None:
                    continue
                if d in early or d in workers[:k] or (d == w and reply is not None):
                    waiter.forget(sentinel)  # it answered this command: the answer stands
                elif d in workers[k:] and self._polled(d):
                    # it answered, then ended (e.g. a start-up error): the answer stands, a
                    # later command finds it gone
                    if d == w:
                        reply = self._read(w, cmd)
                    else:
                        early[d] = self._read(d, cmd)
                    waiter.forget(sentinel)
                else:
                    self._died(d, cmd)
            if reply is not None:
                return reply

    def _polled(self, w: int) -> bool:
        """Whether a message of worker ``w`` is waiting in its pipe."""
        return bool(self._conns[w].poll(0))

    def _read(self, w: int, cmd: str) -> tuple[bool, Any]:
        """Reads (waiting for it if needed) one answer of worker ``w``."""
        wire = self._wires[w]
        try:
            if wire.fd < 0:
                return decode_reply(wire.recv())
            data = os.read(wire.fd, 5)
            reply = FRAMED_REPLIES.get(data)  # a whole one-byte answer
            return decode_reply(wire.finish(data)) if reply is None else reply
        except (EOFError, OSError):
            self._died(w, cmd)
        except Exception as exc:  # an answer that cannot be read: the pipes are out of step
            self._fail(
                f"worker {w} (pid {self._pids[w]}) sent an unreadable answer",
                WorkerError(
                    f"{self.owner}.{cmd}: worker {w} (pid {self._pids[w]}) sent an answer that "
                    f"cannot be read (got {type(exc).__name__}: {exc}; expected a reply of "
                    f"the pool's protocol). The workers were shut down and the {self.owner} is "
                    "closed: build a new one."
                ),
                exc,
            )

    def _raise_remote(self, errors: list[tuple[int, RemoteError]], cmd: str) -> NoReturn:
        errors.sort(key=lambda e: e[0])
        w, info = errors[0]
        others = ""
        if len(errors) > 1:
            others = (
                f" ({len(errors) - 1} other worker(s) failed too: {[e[0] for e in errors[1:]]})"
            )
        if cmd == "start":
            after = f"The {self.owner} is closed: fix the env factory."
        else:
            after = f"The workers are still running; fix the env or close the {self.owner}."
        kind = info.type_name.removeprefix("builtins.")
        err = WorkerError(
            f"{self.owner}.{cmd}: worker {w} (pid {self._pids[w]}) raised {kind}: "
            f"{info.message}{others}. {after}\n--- remote traceback (worker {w}) ---\n"
            f"{info.traceback}"
        )
        raise err from info.original()

    # ------------------------------------------------------------------ failures
    def _died(self, w: int, cmd: str) -> NoReturn:
        proc, pid = self._procs[w], self._pids[w]
        proc.join(timeout=1.0)
        how = describe_exit(proc.exitcode)
        self._fail(
            f"worker {w} (pid {pid}) died with {how}",
            WorkerError(
                f"{self.owner}.{cmd}: worker {w} (pid {pid}) died with {how} (expected it to "
                f"answer). The other workers were shut down and the {self.owner} is closed: "
                "build a new one."
            ),
        )

    def _timed_out(self, workers: Sequence[int], cmd: str, timeout: float) -> NoReturn:
        names = worker_names(workers, self.pids)
        for w in workers:
            self._procs[w].kill()
        self._fail(
            f"{names} did not answer {cmd!r} within {timeout} s",
            TimeoutError(
                f"{self.owner}.{cmd}: {names} did not answer within {timeout} s (got no reply; "
                f"expected one within the timeout). The hung worker(s) were killed and the "
                f"{self.owner} is closed. {self.timeout_hint}"
            ),
        )

    def _fail(
        self, failure: str, error: BaseException, cause: BaseException | None = None
    ) -> NoReturn:
        """Records ``failure``, shuts the pool down (briefly: something is wrong) and raises."""
        self.failure = failure
        self.shutdown(timeout=min(self.shutdown_timeout, 2.0))
        raise error from cause

    # ------------------------------------------------------------------ shutdown
    def shutdown(self, timeout: float | None = None) -> None:
        """Asks every worker to close its env and exit; kills those that do not within
        ``timeout`` (default ``shutdown_timeout``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        if os.getpid() != self._owner_pid:  # a forked copy of the owner: not our processes
            return
        timeout = self.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        started = [p for p in self._procs if p.pid is not None]
        for proc, conn in zip(self._procs, self._conns):
            if proc.pid is not None and proc.exitcode is None:
                try:
                    conn.send_bytes(encode_command("close", ()))
                except OSError:
                    pass
        self._wait_exit(started, deadline)
        for sig in ("terminate", "kill"):
            alive = [p for p in started if p.exitcode is None]
            if not alive:
                break
            for proc in alive:
                getattr(proc, sig)()
            self._wait_exit(alive, time.monotonic() + 2.0)
        for proc in started:
            proc.join(timeout=1.0)
            if proc.exitcode is not None:
                proc.close()
        for conn in self._conns:
            conn.close()
        self._waiter = None
        self._args = []

    @staticmethod
    def _wait_exit(procs: Sequence[Any], deadline: float) -> None:
        pending = {p.sentinel: p for p in procs if p.exitcode is None}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for s in connection.wait(list(pending), timeout=left):
                pending.pop(s).join(timeout=0)  # type: ignore[call-overload]
