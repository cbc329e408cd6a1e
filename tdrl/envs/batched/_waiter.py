"""Waiter: blocks until worker pipes or process sentinels are readable, with a timeout."""

from __future__ import annotations

import math
import select
from collections.abc import Sequence
from multiprocessing import connection
from typing import Any

__all__ = ["Waiter"]

_EVENTS = select.POLLIN | select.POLLHUP | select.POLLERR if hasattr(select, "poll") else 0


class Waiter:
    """Waits on the command pipes of a pool's workers and on their process sentinels.

    ``wait`` wakes up when any of them is readable; ``wait_for(w)`` only for worker ``w``'s pipe
    or any sentinel (a death anywhere ends every wait). Collecting the answers of several
    workers one after the other with ``wait_for`` wakes this process once per worker at most,
    where waking up for each answer as it comes takes the core from the workers still running
    (on a machine with fewer cores than processes, that doubles their waiting time).

    Args:
        pipes: the file descriptor of each worker's pipe, in worker order.
        sentinels: the process sentinels.

    Examples:
        >>> import multiprocessing
        >>> a, b = multiprocessing.Pipe()
        >>> waiter = Waiter([a.fileno()], [])
        >>> waiter.wait_for(0, 0.0)
        []
        >>> b.send_bytes(b"k"); waiter.wait_for(0, 1.0) == [a.fileno()]
        True
    """

    def __init__(self, pipes: Sequence[int], sentinels: Sequence[int]) -> None:
        self._pipes = list(pipes)
        self._sentinels = list(sentinels)
        self._polls: dict[int, Any] = {}  # worker (or -1: every pipe) -> select.poll object

    def _poll(self, key: int) -> Any:
        poll = self._polls.get(key)
        if poll is None:
            poll = self._polls[key] = select.poll()
            for fd in (self._pipes if key < 0 else [self._pipes[key]]) + self._sentinels:
                poll.register(fd, _EVENTS)
        return poll

    def poller(self, worker: int) -> Any:
        """The ``select.poll`` object behind ``wait_for(worker)`` (None without ``poll``), for
        loops that cannot afford a call more per wait."""
        return self._poll(worker) if _EVENTS else None

    def forget(self, fd: int) -> None:
        """Stops watching the sentinel ``fd`` (it stays readable once it fired)."""
        if fd in self._sentinels:
            self._sentinels.remove(fd)
            for poll in self._polls.values():
                poll.unregister(fd)

    def wait(self, timeout_s: float) -> list[int]:
        """The readable descriptors among all pipes and sentinels (empty after the timeout)."""
        return self._wait(-1, timeout_s)

    def wait_for(self, worker: int, timeout_s: float) -> list[int]:
        """The readable descriptors among ``worker``'s pipe and the sentinels."""
        return self._wait(worker, timeout_s)

    def _wait(self, key: int, timeout_s: float) -> list[int]:
        if _EVENTS:
            ms = max(0, math.ceil(timeout_s * 1000))
            return [fd for fd, _ in self._poll(key).poll(ms)]
        fds = (self._pipes if key < 0 else [self._pipes[key]]) + self._sentinels
        return list(connection.wait(fds, timeout_s))  # type: ignore[arg-type]
