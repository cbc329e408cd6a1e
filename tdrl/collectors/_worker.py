"""The worker side of the multi-process collectors, and the pool adapter that starts them.

The process machinery (command pipes, bounded waits on pipes and process sentinels, remote
tracebacks, the parent-death watchdog, bounded shutdown) is the batched envs' ``WorkerPool``;
this module only adds what a collector needs on top: a worker target that runs a
:class:`Collector`, commands with per-worker arguments, a wait for whichever worker answers
first, and sending a shared-memory buffer to running workers.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from typing import Any, NoReturn, cast

import cloudpickle
import torch
from tensordict import TensorDictBase

from tdrl.collectors._collector import Collector
from tdrl.collectors._weight_sync import WeightReceiver
from tdrl.envs.batched._pool import WorkerPool, _Waiter
from tdrl.envs.batched._worker import (
    WorkerOptions,
    _encode_error,
    _encode_result,
    _serve,
    _set_parent_death_signal,
    _watchdog,
    decode_reply,
    encode_command,
)
from tdrl.envs.core import EnvBase

__all__ = ["TRAJ_KEY", "WORKER_KEY", "CollectorPool", "WorkerSetup"]

TRAJ_KEY = ("collector", "traj_ids")
WORKER_KEY = ("collector", "worker_id")


@dataclass
class WorkerSetup:
    """What a worker needs to build its collector (sent cloudpickled, policy by value)."""

    create_env_fn: Any
    policy: Any
    collector_kwargs: dict[str, Any]
    num_workers: int


def _tail(key: Any) -> tuple[str, ...]:
    return tuple(key[-2:]) if isinstance(key, tuple) else (key,)


def _dry_run(env: EnvBase, policy: Any, kwargs: dict[str, Any]) -> TensorDictBase:
    """One step of collection with the worker's settings: the layout of a batch, ``[*B, 1]``."""
    probe_kwargs = dict(kwargs, frames_per_batch=max(env.batch_size.numel(), 1), total_frames=-1)
    probe = Collector(env, policy, **probe_kwargs)
    layout = probe.rollout().clone()
    probe.shutdown()
    return layout


class _Server:
    """The commands a collector worker answers (``_serve`` calls them by name)."""

    def __init__(self, index: int, setup: WorkerSetup, receiver: WeightReceiver) -> None:
        self.index, self.num_workers = index, setup.num_workers
        env = setup.create_env_fn()
        self.env = env
        receiver.attach(setup.policy)
        self.receiver = receiver
        self.layout = _dry_run(env, setup.policy, setup.collector_kwargs)
        self.collector = Collector(env, setup.policy, **setup.collector_kwargs)
        self._row: TensorDictBase | None = None
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._ids: list[torch.Tensor] = []

    def attach(self, buffer: TensorDictBase) -> None:
        """Takes this worker's row of the shared ``[num_workers, *B, T]`` batch buffer."""
        self._row = buffer[self.index]

    def _bind(self, batch: TensorDictBase) -> None:
        row = self._row
        assert row is not None
        pairs = []
        for key in batch.keys(True, True):
            dst = row.get(key, None)
            src = batch.get(key)
            if dst is None or dst.shape != src.shape or dst.dtype != src.dtype:
                raise KeyError(
                    f"MultiCollector worker {self.index}: batch entry {key!r} does not fit the "
                    f"shared buffer (got {tuple(src.shape)} {src.dtype}; buffer keys: "
                    f"{sorted(map(str, row.keys(True, True)))}). The policy or env wrote other "
                    "keys than in the dry run: write the same keys at every step."
                )
            pairs.append((src, dst))
        self._pairs = pairs
        self._ids = [row.get(k) for k in row.keys(True, True) if _tail(k) == TRAJ_KEY]

    def collect(self, message: Any) -> None:
        """Applies pending weights, collects one batch and copies it into the shared row."""
        self.receiver.receive(message)
        batch = self.collector.rollout()
        if self._pairs is None:
            self._bind(batch)
        assert self._pairs is not None
        for src, dst in self._pairs:
            dst.copy_(src)
        # interleave the ids: worker w owns the ids congruent to w modulo num_workers
        for ids in self._ids:
            ids.mul_(self.num_workers).add_(self.index)

    def set_seed(self, seed: int) -> int:
        return int(self.collector.set_seed(seed))

    def state_dict(self) -> dict[str, Any]:
        return self.collector.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.collector.load_state_dict(state)

    def close(self) -> None:
        self.collector.shutdown()
        self.env.close()


def collector_worker_main(
    index: int, conn: Any, payload: bytes, receiver: WeightReceiver, options: WorkerOptions
) -> None:
    """Entry point of a collector worker: build env, policy and collector, report the batch
    layout, serve commands. Same lifecycle as a ParallelEnv worker (watchdog, SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
    try:
        server = _Server(index, cloudpickle.loads(payload), receiver)
    except Exception as exc:
        conn.send_bytes(_encode_error(exc))
        return
    conn.send_bytes(_encode_result(server.layout))
    try:
        _serve(conn, cast(Any, server))  # _serve dispatches by name; typed for EnvRunner
    finally:
        stop.set()
        conn.close()


_LIVE: weakref.WeakSet[CollectorPool] = weakref.WeakSet()
_ATEXIT_LOCK = threading.Lock()
_atexit_registered = False


def _shutdown_live_pools() -> None:
    # Runs before multiprocessing's exit handler (registered earlier, atexit is LIFO), which
    # would otherwise join our non-daemonic workers forever.
    for pool in list(_LIVE):
        try:
            pool.shutdown()
        except Exception:
            pass


def _track(pool: CollectorPool) -> None:
    global _atexit_registered
    with _ATEXIT_LOCK:
        if not _atexit_registered:
            atexit.register(_shutdown_live_pools)
            _atexit_registered = True
        _LIVE.add(pool)


class CollectorPool(WorkerPool):
    """A :class:`WorkerPool` whose workers run collectors.

    Args:
        owner: the collector's class name, for messages.
        ctx: the multiprocessing context.
        num_threads, step_timeout, start_timeout, shutdown_timeout: as for ``WorkerPool``
            (``step_timeout`` bounds every command, one batch included).
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
    ) -> None:
        super().__init__(
            owner,
            ctx,
            [],
            cast(Any, None),
            num_threads=num_threads,
            step_timeout=step_timeout,
            start_timeout=start_timeout,
            shutdown_timeout=shutdown_timeout,
        )

    def launch(self, payloads: Sequence[bytes], receivers: Sequence[WeightReceiver]) -> list[Any]:
        """Starts one worker per payload; returns the batch layout each reports."""
        options = WorkerOptions(
            num_threads=self._num_threads,
            parent_pid=os.getpid(),
            pdeathsig=threading.current_thread() is threading.main_thread(),
        )
        _track(self)
        try:
            for i, (payload, receiver) in enumerate(zip(payloads, receivers)):
                parent_conn, child_conn = self._ctx.Pipe()
                proc = self._ctx.Process(  # type: ignore[attr-defined]
                    target=collector_worker_main,
                    args=(i, child_conn, payload, receiver, options),
                    name=f"tdrl-{self.owner}-worker-{i}",
                    daemon=False,
                )
                self._procs.append(proc)
                self._conns.append(parent_conn)
                proc.start()
                self._pids.append(proc.pid)
                child_conn.close()
        except BaseException:
            self.shutdown()
            raise
        for i, (proc, conn) in enumerate(zip(self._procs, self._conns)):
            self._fd_worker[conn.fileno()] = i
            self._sentinel_worker[proc.sentinel] = i
        self._waiter = _Waiter([*self._fd_worker, *self._sentinel_worker])
        return self._collect(range(len(self._procs)), "start", self.start_timeout)

    def send(self, worker: int, cmd: str, args: tuple, *, share: bool = False) -> None:
        """Sends one command; ``share=True`` passes tensors as shared-memory handles."""
        if share:
            msg = b"x" + bytes(ForkingPickler.dumps((cmd, args)))
        else:
            msg = encode_command(cmd, args)
        try:
            self._conns[worker].send_bytes(msg)
        except OSError:
            self._died(worker, cmd)

    def gather(self, workers: Sequence[int], cmd: str) -> list[Any]:
        """Waits for the answers of ``workers`` to the ``cmd`` they were sent."""
        return self._collect(workers, cmd, self.step_timeout)

    def wait_any(self, workers: Sequence[int], cmd: str) -> tuple[int, bool, Any]:
        """Waits for the first of ``workers`` to answer ``cmd``; returns ``(worker, ok, value)``
        (``value`` is a ``RemoteError`` when not ok: pass it to :meth:`raise_remote`).

        Raises:
            WorkerError: a worker died. TimeoutError: none answered within ``step_timeout``.
        """
        slots = {self._conns[w].fileno(): w for w in workers}
        deadline = time.monotonic() + self.step_timeout
        assert self._waiter is not None
        while True:
            ready = self._waiter.wait(deadline - time.monotonic())
            if not ready:
                if time.monotonic() >= deadline:
                    self._timed_out(list(workers), cmd, self.step_timeout)
                continue
            for fd in ready:  # deaths first: a live worker's answers must not hide them
                w = self._sentinel_worker.get(fd)
                if w is not None:
                    self._died(w, cmd)
            for fd in ready:
                w = slots.get(fd)
                if w is not None:
                    try:
                        ok, value = decode_reply(self._conns[w].recv_bytes())
                    except (EOFError, OSError):
                        self._died(w, cmd)
                    return w, ok, value
            # a pipe of a worker nobody waits for is readable: it can only have closed
            self._died(self._fd_worker[ready[0]], cmd)

    def raise_remote(self, worker: int, error: Any, cmd: str) -> NoReturn:
        """Raises the ``WorkerError`` of an error answer (see ``wait_any``)."""
        self._raise_remote([(worker, error)], cmd)
