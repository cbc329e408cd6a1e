"""A replay buffer shared between processes (TorchRL's ``shared=True``).

The buffer's parts keep their bookkeeping in plain Python ints (fast in one process). A shared
buffer swaps its thread lock for :class:`ProcessShared`: a lock that also takes a
multiprocessing lock and, while held, mirrors those ints (the storage fill level, the writer
cursor and write count, ...) to and from a small array in shared memory. Storage tensors live in
shared memory (or in memory-mapped files), so every process reads and writes the same data.
Unshared buffers keep their ``threading.RLock``: nothing here runs for them.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from typing import Any

__all__ = ["LOCK_TIMEOUT", "ProcessShared", "check_shareable"]

#: seconds a process waits for the buffer lock held by another process before TimeoutError.
LOCK_TIMEOUT = 120.0


def check_shareable(where: str, parts: tuple[Any, ...]) -> None:
    """Raises ``RuntimeError`` naming the first part (storage, sampler or writer) whose state
    cannot be shared between processes, or a storage not allocated yet.

    Examples:
        >>> from tdrl.data import ListStorage
        >>> check_shareable("here", (ListStorage(4),))
        Traceback (most recent call last):
        ...
        RuntimeError: here: ListStorage cannot be shared between processes (got a ListStorage ...
    """
    for part in parts:
        problem = part.share_problem()
        if problem is not None:
            raise RuntimeError(
                f"{where}: {type(part).__name__} cannot be shared between processes ({problem}"
            )


class ProcessShared:
    """The lock of a shared buffer, usable as ``with lock:`` (reentrant within a process).

    Entering (outermost level) takes a thread lock, then the multiprocessing lock (at most
    :data:`LOCK_TIMEOUT` seconds), and loads the shared ints into the parts; leaving stores them
    back, moves newly allocated storage memory into shared memory, and releases both locks.

    Args:
        parts: the storage, sampler and writer; each lists its shared int attributes in
            ``shared_ints``.

    Examples:
        >>> import torch
        >>> from tdrl.data import LazyTensorStorage, RandomSampler, RoundRobinWriter
        >>> storage, writer = LazyTensorStorage(4), RoundRobinWriter()
        >>> lock = ProcessShared((storage, RandomSampler(), writer))
        >>> with lock:
        ...     writer.write(storage, storage.prepare(torch.arange(3)))
        tensor([0, 1, 2])
        >>> storage.share_problem() is None, bool(storage._bufs[0].is_shared())
        (True, True)
    """

    def __init__(self, parts: tuple[Any, ...]) -> None:
        self._parts = parts
        self._fields = [(part, attr) for part in parts for attr in part.shared_ints]
        # A spawn-context lock works with fork, forkserver and spawn children alike (a lock of a
        # fork context cannot be sent to a spawned process).
        ctx = multiprocessing.get_context("spawn")
        self._mp_lock = ctx.Lock()
        # One slot per shared int, plus the storage layout generation (last slot).
        self._values = ctx.RawArray("q", len(self._fields) + 1)
        self._pid = os.getpid()
        self._bufs: Any = None
        self._generation = 0
        self._local()
        self._publish()  # this process's ints, and its storage memory moved to shared memory

    def _local(self) -> None:
        self._thread_lock = threading.RLock()
        self._depth = 0

    def __getstate__(self) -> dict[str, Any]:
        # Only sent while spawning a process (the buffer checks): the lock and the array travel
        # as handles to the same shared objects.
        state = dict(self.__dict__)
        for local in ("_thread_lock", "_depth", "_bufs"):
            state.pop(local)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()  # checked by the sending process already
        # The storage arrived first (it is part of the state): its memory is the shared one.
        self._bufs = getattr(self._parts[0], "_bufs", None)
        self._local()

    def __enter__(self) -> ProcessShared:
        self._thread_lock.acquire()
        if self._depth == 0:
            try:
                self._acquire()
            except BaseException:
                self._thread_lock.release()
                raise
        self._depth += 1
        return self

    def _acquire(self) -> None:
        if not self._mp_lock.acquire(timeout=LOCK_TIMEOUT):
            raise TimeoutError(
                f"ReplayBuffer: the shared buffer lock was not released by another process (got "
                f"no release within {LOCK_TIMEOUT} s; expected extend/sample calls to finish). "
                "A process probably died while writing; rebuild the buffer."
            )
        try:
            if self._pid != os.getpid():  # a forked child's first use
                check_shareable("ReplayBuffer (in a forked process)", self._parts)
                self._pid = os.getpid()
            values = self._values
            if values[-1] != self._generation:
                raise RuntimeError(
                    "ReplayBuffer: another process re-allocated the shared storage (got layout "
                    f"generation {values[-1]}; this process holds {self._generation}). Load "
                    "checkpoints of another layout before starting the processes."
                )
            for i, (part, attr) in enumerate(self._fields):
                setattr(part, attr, values[i])
        except BaseException:
            self._mp_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0:
                try:
                    self._publish()
                finally:
                    self._mp_lock.release()
        finally:
            self._thread_lock.release()

    def _publish(self) -> None:
        values = self._values
        for i, (part, attr) in enumerate(self._fields):
            values[i] = getattr(part, attr)
        storage = self._parts[0]
        bufs = getattr(storage, "_bufs", None)
        if bufs and bufs is not self._bufs:  # first allocation, or a new layout
            storage.share_memory_()
            self._parts[1].share_memory_()  # the sampler (its state is sized by the storage)
            self._bufs = bufs
            self._generation += 1
            values[-1] = self._generation
