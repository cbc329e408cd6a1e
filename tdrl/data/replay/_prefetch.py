"""A background thread that keeps a bounded queue of precomputed samples."""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["Prefetcher"]

#: seconds a caller waits for one prefetched batch before ``TimeoutError``.
GET_TIMEOUT = 120.0
#: seconds ``close`` waits for the thread to finish.
JOIN_TIMEOUT = 30.0
_POLL = 0.05


# Prefetchers still running; stopped by an exit hook registered with the first one. A daemon thread
# caught inside a torch op while the interpreter finalises aborts the process ("terminate called
# without an active exception"), so every thread is stopped before that, while Python still runs.
_LIVE: weakref.WeakSet[Prefetcher] = weakref.WeakSet()
_EXIT_HOOK: list[bool] = []


def _close_all() -> None:
    for prefetcher in list(_LIVE):
        with contextlib.suppress(Exception):
            prefetcher.close()


def _track(prefetcher: Prefetcher) -> None:
    if not _EXIT_HOOK:
        atexit.register(_close_all)
        _EXIT_HOOK.append(True)
    _LIVE.add(prefetcher)


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher:
    """Runs ``produce()`` in a daemon thread and queues up to ``depth`` results ahead.

    Threads still running when the interpreter exits are stopped by an exit hook (the current
    ``produce()`` call finishes first), so a buffer that was never closed does not abort the
    process.

    An exception raised by ``produce`` stops the thread and is re-raised (the same exception
    object, with its traceback) by the next :meth:`get`.

    Args:
        produce: called repeatedly in the thread.
        depth: the queue bound (results computed ahead).

    Examples:
        >>> import itertools
        >>> counter = itertools.count()
        >>> p = Prefetcher(lambda: next(counter), depth=2)
        >>> [p.get() for _ in range(3)]
        [0, 1, 2]
        >>> p.close()
    """

    def __init__(self, produce: Callable[[], Any], depth: int) -> None:
        self._produce = produce
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tdrl-prefetch", daemon=True)
        _track(self)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._produce()
            except BaseException as err:  # handed to the consumer thread
                self._put(_Failure(err))
                return
            if not self._put(item):
                return

    def get(self) -> Any:
        """Returns the next result (re-raising the thread's exception, if any).

        Raises:
            TimeoutError: if no result arrives within :data:`GET_TIMEOUT` seconds.
        """
        try:
            item = self._queue.get(timeout=GET_TIMEOUT)
        except queue.Empty:
            raise TimeoutError(
                f"ReplayBuffer.sample: no prefetched batch within {GET_TIMEOUT} s (got none; "
                "expected the prefetch thread to keep up). Check for a blocked storage."
            ) from None
        if isinstance(item, _Failure):
            raise item.error
        return item

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Stops the thread and drops queued results; idempotent.

        Raises:
            TimeoutError: if the thread does not stop within :data:`JOIN_TIMEOUT` seconds.
        """
        self._stop.set()
        _LIVE.discard(self)
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT)
            if self._thread.is_alive():
                raise TimeoutError(
                    f"Prefetcher.close: the prefetch thread did not stop within {JOIN_TIMEOUT} s "
                    "(got a running thread; expected it to finish its current sample). A sample "
                    "is blocked; check the storage and transform."
                )
