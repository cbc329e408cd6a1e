"""The worker side of a :class:`WorkerPool`: wire protocol, start-up and command loop.

Any object with a ``close()`` method can serve commands (``serve`` calls its methods by name);
:func:`run_worker` is the whole life of a worker process: start-up (SIGINT ignored, parent-death
signal, watchdog thread, thread count), building the server, reporting a first value, serving.

The pipe carries only small byte strings. A command is one code byte, followed by a pickled
``(name, args)`` pair for the commands that need arguments; the argument-free step commands of
the batched envs are a single byte. A reply is one code byte, possibly followed by a pickled
value: ``k`` (done, no value), ``0``/``1`` (a bool), ``v`` (a value), ``e`` (an error
description).
"""

from __future__ import annotations

import ctypes
import os
import pickle  # IPC with our own worker processes only: never used to load a checkpoint
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any, Protocol

import torch

from tdrl.envs.batched._wire import Wire, frame

__all__ = [
    "FRAMED_REPLIES",
    "CommandServer",
    "RemoteError",
    "WorkerOptions",
    "decode_reply",
    "describe_exit",
    "encode_command",
    "framed_command",
    "run_worker",
    "worker_names",
]

_GENERIC = b"x"
_CLOSE = b"c"
# single-byte commands: (name, args) of the frequent argument-free commands
_SHORT = {b"s": ("step", ((),)), b"m": ("step_and_maybe_reset", ((),))}
_SHORT_CODES = {name: code for code, (name, _) in _SHORT.items()}
_WATCHDOG_PERIOD_S = 0.5
PARENT_DIED_EXIT_CODE = 75
_PR_SET_PDEATHSIG = 1


class CommandServer(Protocol):
    """What a worker serves: methods called by command name; ``close`` ends the worker."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class WorkerOptions:
    """Per-process settings of a worker.

    Attributes:
        num_threads: torch intra-op threads in the worker.
        parent_pid: pid of the process that owns the worker.
        pdeathsig: ask Linux to SIGKILL the worker when its parent thread dies (only safe when the
            workers were started from the main thread).
    """

    num_threads: int
    parent_pid: int
    pdeathsig: bool


@dataclass(frozen=True)
class RemoteError:
    """An exception raised in a worker, as it crosses the pipe."""

    type_name: str
    message: str
    traceback: str
    exception: bytes | None

    def original(self) -> BaseException | None:
        """The unpickled exception, when it can be rebuilt in this process."""
        if self.exception is None:
            return None
        try:
            exc = pickle.loads(self.exception)
        except Exception:
            return None
        return exc if isinstance(exc, BaseException) else None


def encode_command(cmd: str, args: tuple, *, share: bool = False) -> bytes:
    """The bytes of a command (a single byte for the argument-free step commands).

    ``share=True`` pickles with ``ForkingPickler``: tensors in shared memory travel as handles
    to the same memory (for handing shared buffers to running workers).

    Examples:
        >>> encode_command("step", ((),)), encode_command("step_and_maybe_reset", ((),))
        (b's', b'm')
    """
    if cmd == "close":
        return _CLOSE
    code = _SHORT_CODES.get(cmd)
    if code is not None and not args[0]:
        return code
    if share:
        return _GENERIC + bytes(ForkingPickler.dumps((cmd, args)))
    return _GENERIC + pickle.dumps((cmd, args), protocol=pickle.HIGHEST_PROTOCOL)


# The framed bytes (see ``_wire.frame``) of the one-byte messages that make most of the traffic:
# the argument-free step commands, and the answers without a value or with a bool.
_STEP_FRAMES = {name: frame(code) for code, (name, _) in _SHORT.items()}
_REPLY_FRAMES = {None: frame(b"k"), True: frame(b"1"), False: frame(b"0")}
FRAMED_REPLIES: dict[bytes, tuple[bool, Any]] = {f: (True, v) for v, f in _REPLY_FRAMES.items()}


def framed_command(cmd: str, args: tuple) -> bytes:
    """The framed bytes of a command (``encode_command`` then ``frame``; the step commands'
    are built once).

    Examples:
        >>> framed_command("step", ((),)) == frame(encode_command("step", ((),)))
        True
    """
    if len(args) == 1 and args[0] == ():
        framed = _STEP_FRAMES.get(cmd)
        if framed is not None:
            return framed
    return frame(encode_command(cmd, args))


def _encode_result(value: Any) -> bytes:
    if value is None:
        return b"k"
    if value is True:
        return b"1"
    if value is False:
        return b"0"
    return b"v" + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _encode_error(exc: BaseException) -> bytes:
    blob: bytes | None
    try:
        blob = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)
    except Exception:
        blob = None
    kind = type(exc)
    info = RemoteError(
        type_name=f"{kind.__module__}.{kind.__qualname__}",
        message=str(exc),
        traceback=traceback.format_exc(),
        exception=blob,
    )
    return b"e" + pickle.dumps(info, protocol=pickle.HIGHEST_PROTOCOL)


def decode_reply(data: bytes) -> tuple[bool, Any]:
    """``(ok, value)`` from reply bytes; ``value`` is a :class:`RemoteError` when not ok.

    Examples:
        >>> decode_reply(b"1"), decode_reply(b"k")
        ((True, True), (True, None))
    """
    code = data[:1]
    if code == b"k":
        return True, None
    if code == b"1":
        return True, True
    if code == b"0":
        return True, False
    if code == b"v":
        return True, pickle.loads(data[1:])
    if code == b"e":
        return False, pickle.loads(data[1:])
    raise RuntimeError(f"WorkerPool: unknown reply from a worker (got {data[:16]!r}).")


# ---------------------------------------------------------------------- process side
def _set_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watchdog thread still runs
        pass


def _parent_alive(parent_pid: int, start_ppid: int) -> bool:
    if os.getppid() != start_ppid:  # re-parented: the process (or forkserver) that made us died
        return False
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watchdog(parent_pid: int, start_ppid: int, stop: threading.Event) -> None:
    # A hung worker or a sibling holding our pipe open under fork can hide the parent's death
    # from the command loop, so this thread checks the parent itself and ends the process.
    while not stop.wait(_WATCHDOG_PERIOD_S):
        if not _parent_alive(parent_pid, start_ppid):
            os._exit(PARENT_DIED_EXIT_CODE)


def _start_up(options: WorkerOptions) -> threading.Event:
    """Worker process set-up; returns the event that stops the watchdog thread."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    if options.pdeathsig:
        _set_parent_death_signal()
    stop = threading.Event()
    threading.Thread(
        target=_watchdog,
        args=(options.parent_pid, os.getppid(), stop),
        name="tdrl-parent-watchdog",
        daemon=True,
    ).start()
    torch.set_num_threads(options.num_threads)
    return stop


def serve(conn: Any, server: CommandServer) -> None:
    """Answers commands until ``close`` (no reply) or until the parent closes the pipe."""
    wire = Wire(conn)
    short_replies = _REPLY_FRAMES
    while True:
        try:
            msg = wire.recv()
        except (EOFError, OSError):  # the parent closed the pipe or died
            return
        code = msg[:1]
        if code == _CLOSE:  # no reply: the parent waits for the process to end
            server.close()  # an error here ends the process with its traceback on stderr
            return
        try:
            short = _SHORT.get(code)
            cmd, args = short if short is not None else pickle.loads(msg[1:])
            value = getattr(server, cmd)(*args)
            if value is None or type(value) is bool:
                reply = short_replies[value]
            else:
                reply = frame(_encode_result(value))
        except Exception as exc:
            reply = frame(_encode_error(exc))
        try:
            wire.send_frame(reply)
        except OSError:
            return


def run_worker(
    conn: Any, options: WorkerOptions, build: Callable[[], tuple[CommandServer, Any]]
) -> None:
    """The life of a worker process: start-up, ``build()`` the server, reply with the value it
    returns beside the server (or with the error that prevented building it), serve commands."""
    stop = _start_up(options)
    try:
        try:
            server, hello = build()
        except Exception as exc:
            conn.send_bytes(_encode_error(exc))
            return
        conn.send_bytes(_encode_result(hello))
        serve(conn, server)
    finally:
        stop.set()
        conn.close()


def describe_exit(exitcode: int | None) -> str:
    """Human-readable process end: ``"exit code 3"`` or ``"signal SIGKILL"``.

    Examples:
        >>> describe_exit(3), describe_exit(-9)
        ('exit code 3', 'signal SIGKILL (exit code -9)')
    """
    if exitcode is None:
        return "an unknown status (still running)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"signal {name} (exit code {exitcode})"
    if exitcode == PARENT_DIED_EXIT_CODE:
        return f"exit code {exitcode} (its parent watchdog fired)"
    return f"exit code {exitcode}"


def worker_names(workers: Sequence[int], pids: Sequence[int | None]) -> str:
    """``"worker 0 (pid 12)"`` lists for messages."""
    return ", ".join(f"worker {w} (pid {pids[w]})" for w in workers)
