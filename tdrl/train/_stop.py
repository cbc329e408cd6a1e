"""GracefulStop: SIGTERM and Ctrl-C end a training run with a checkpoint."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["EXIT_INTERRUPTED", "EXIT_STOP_TIMEOUT", "GracefulStop", "StopTimeout"]

EXIT_STOP_TIMEOUT = 124  # the stop overran its time limit (as timeout(1) reports it)
EXIT_INTERRUPTED = 130  # a second Ctrl-C (128 + SIGINT, the shell's convention)
_GRACE_S = 15.0  # after an overrun: time to close envs and actors before the hard exit


class StopTimeout(KeyboardInterrupt):
    """The stop asked for by a signal did not finish within its time limit.

    A ``KeyboardInterrupt``: code that cleans up after Ctrl-C (closing worker processes and
    actors, removing a half-written checkpoint) cleans up after it too.
    """


class GracefulStop:
    """While active, SIGTERM and SIGINT ask the run to stop after its current iteration.

    The first SIGTERM or SIGINT (Ctrl-C) sets :attr:`requested`: the trainer finishes the
    iteration in progress (collection and update), writes a checkpoint and returns, and
    ``tdrl train`` exits 0. The stop has ``timeout`` seconds: past them :class:`StopTimeout` is
    raised in the main thread (no checkpoint is written: the previous one stays intact; the
    command exits with :data:`EXIT_STOP_TIMEOUT`), and if the process still runs 15 s later it
    exits at once with that code. A second SIGINT raises ``KeyboardInterrupt`` at once (the
    command exits with :data:`EXIT_INTERRUPTED`); a second SIGTERM is reported and otherwise
    ignored (schedulers may send it to every process of a job: the stop under way already
    has its limit).

    Handlers can only be installed by the main thread; :meth:`install` may be called again
    to put them back after a library replaced them (``ray.init`` installs its own SIGTERM
    handler). :meth:`uninstall` restores the previous handlers.

    Args:
        timeout: seconds from the first signal to the end of the stop (finite, > 0).
        where: the command named in messages.

    Examples:
        >>> stop = GracefulStop(timeout=30.0)
        >>> with stop:
        ...     os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler sends
        ...     print(stop.requested)
        SIGTERM
    """

    def __init__(self, timeout: float = 30.0, *, where: str = "tdrl train") -> None:
        ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
        if not ok or not timeout > 0 or math.isinf(timeout):
            raise ValueError(
                f"GracefulStop.__init__: timeout must be a finite number of seconds > 0 (got "
                f"{timeout!r}). Pass e.g. --stop-timeout 30."
            )
        self.timeout = float(timeout)
        self.where = where
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}
        self._done = threading.Event()

    # ------------------------------------------------------------------ handlers
    def install(self) -> GracefulStop:
        """Installs the handlers of SIGTERM, SIGINT and SIGALRM (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "GracefulStop.install: signal handlers can only be installed by the main thread "
                f"(got thread {threading.current_thread().name!r}). Run the trainer in the "
                "main thread, or train without GracefulStop."
            )
        for signum, handler in (
            (signal.SIGTERM, self._on_signal),
            (signal.SIGINT, self._on_signal),
            (signal.SIGALRM, self._on_alarm),
        ):
            previous = signal.signal(signum, handler)
            self._previous.setdefault(signum, previous)
        return self

    def uninstall(self) -> None:
        """Cancels the time limit and puts the previous handlers back (idempotent)."""
        self._done.set()
        if threading.current_thread() is not threading.main_thread():
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def __enter__(self) -> GracefulStop:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is None:
            self.requested = name
            _say(
                f"{self.where}: {name} received: finishing the current iteration, then "
                f"writing a checkpoint and exiting (within {self.timeout:g} s; a second Ctrl-C "
                "stops at once)"
            )
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
            threading.Thread(target=self._backstop, name="tdrl-stop-backstop", daemon=True).start()
            return
        if signum == signal.SIGINT:
            _say(f"{self.where}: second Ctrl-C: stopping at once, without a new checkpoint")
            raise KeyboardInterrupt
        _say(f"{self.where}: {name} received again: the stop is under way")

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is None or self._done.is_set():
            return
        raise StopTimeout(
            f"{self.where}: the stop asked for by {self.requested} did not finish within "
            f"{self.timeout:g} s (got an iteration or checkpoint still running; expected it to "
            "end in time). No new checkpoint was written: the previous one is intact. Pass a "
            "larger --stop-timeout if iterations are this slow."
        )

    def _backstop(self) -> None:
        """Ends the process if the main thread is stuck past the limit and the grace time."""
        if self._done.wait(self.timeout + _GRACE_S):
            return
        _say(
            f"{self.where}: the stop did not end within {self.timeout + _GRACE_S:g} s: exiting "
            f"now with code {EXIT_STOP_TIMEOUT} (the previous checkpoint is intact)"
        )
        os._exit(EXIT_STOP_TIMEOUT)


def _say(message: str) -> None:
    """Writes a line on stderr from a signal handler: the main thread may be inside a write to
    stderr (a progress bar), where a buffered write would raise a reentrant-call error."""
    try:
        print(message, file=sys.stderr, flush=True)
    except RuntimeError:
        try:
            os.write(2, f"{message}\n".encode())
        except OSError:
            pass
    except (OSError, ValueError):  # stderr closed or gone: the stop goes on
        pass
