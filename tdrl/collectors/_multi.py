"""Multi-process collectors: one :class:`Collector` per worker process, batches in shared memory.

Each worker builds its env and a copy of the policy, runs a dry step to learn the layout of a
batch and reports it; the parent allocates one ``[num_workers, *env.batch_size, T]`` buffer in
shared memory and hands every worker its row. From then on a worker answers a small "collect"
command by collecting a batch with its :class:`Collector` and copying it into its row: the pipes
only carry commands (and, with :class:`MultiProcessWeightSyncScheme`, weights).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDictBase

from tdrl.collectors._collector import ClosingContext, iterate_batches
from tdrl.collectors._weight_sync import (
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightSyncScheme,
    as_weights,
    policy_weights,
)
from tdrl.collectors._worker import WORKER_KEY, WorkerSetup, collector_worker_main
from tdrl.envs import EnvBase
from tdrl.envs.batched._pool import WorkerPool
from tdrl.envs.batched._shared import TreeBuffer
from tdrl.errors import WorkerError
from tdrl.modules._exploration_type import ExplorationType

__all__ = ["MultiCollectorBase", "MultiCollectorOptions"]

Policy = Callable[[TensorDictBase], TensorDictBase]
_START_METHODS = ("spawn", "fork", "forkserver")


@dataclass(frozen=True)
class MultiCollectorOptions:
    """Rarely changed settings of the multi-process collectors.

    Attributes:
        env_device: device of the env data in the workers.
        policy_device: device the policy runs on in the workers.
        storing_device: device of the yielded batches (they are collected into shared cpu
            memory; another device costs one copy per batch).
        num_threads: torch intra-op threads per worker.
        start_timeout: seconds to wait for the workers to build env, policy and collector.
        batch_timeout: seconds to wait for a worker's answer to any command (one batch
            included); a worker past it is killed and ``TimeoutError`` is raised.
        shutdown_timeout: seconds ``shutdown`` waits for clean exits before killing.

    Examples:
        >>> MultiCollectorOptions(batch_timeout=30.0).batch_timeout
        30.0
    """

    env_device: torch.device | str | None = None
    policy_device: torch.device | str | None = None
    storing_device: torch.device | str | None = None
    num_threads: int = 1
    start_timeout: float = 120.0
    batch_timeout: float = 300.0
    shutdown_timeout: float = 10.0


def _check_options(owner: str, method: str, options: MultiCollectorOptions) -> None:
    if method not in _START_METHODS:
        raise ValueError(
            f"{owner}.__init__: unknown mp_start_method (got {method!r}; expected one of "
            f"{_START_METHODS}). Pass None for 'spawn'."
        )
    for name in ("start_timeout", "batch_timeout", "shutdown_timeout"):
        value = getattr(options, name)
        if not value > 0 or math.isinf(value):
            raise ValueError(
                f"{owner}.__init__: options.{name} must be a finite number of seconds > 0 "
                f"(got {value!r}). Pass e.g. 60.0."
            )


def _layout_difference(a: TensorDictBase, b: TensorDictBase) -> str | None:
    keys_a, keys_b = set(a.keys(True, True)), set(b.keys(True, True))
    if keys_a != keys_b:
        return f"keys {sorted(map(str, keys_a ^ keys_b))} are not in both"
    for key in keys_a:
        x, y = a.get(key), b.get(key)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{key!r}: {tuple(x.shape)} {x.dtype} != {tuple(y.shape)} {y.dtype}"
    return None


class MultiCollectorBase(ClosingContext):
    """What :class:`MultiSyncCollector` and :class:`MultiAsyncCollector` share (see them).

    Subclasses write ``_worker_frames`` (frames per worker batch) and ``_next_batch``.
    """

    def __init__(
        self,
        create_env_fns: Sequence[Callable[[], EnvBase]],
        policy: Policy | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        max_frames_per_traj: int | None = None,
        init_random_frames: int = 0,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        replay_buffer: Any = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        weight_sync: WeightSyncScheme | None = None,
        mp_start_method: str | None = None,
        options: MultiCollectorOptions | None = None,
        return_same_td: bool = False,
    ) -> None:
        owner = type(self).__name__
        self._owner = owner
        self._closed = True  # until the workers run: shutdown() must then do nothing
        fns = list(create_env_fns) if isinstance(create_env_fns, (list, tuple)) else None
        if not fns or not all(callable(f) for f in fns):
            raise TypeError(
                f"{owner}.__init__: create_env_fns must be a non-empty list of callables "
                f"returning an EnvBase, one per worker (got {create_env_fns!r}). Pass e.g. "
                "[make_env] * 2."
            )
        if frames_per_batch <= 0:
            raise ValueError(
                f"{owner}.__init__: frames_per_batch must be positive (got {frames_per_batch})."
            )
        options = options or MultiCollectorOptions()
        method = mp_start_method or "spawn"
        _check_options(owner, method, options)
        self.num_workers = len(fns)
        self.policy = policy
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.split_trajs = split_trajs
        self.replay_buffer = replay_buffer
        self.postproc = postproc
        if return_same_td and replay_buffer is not None:
            raise ValueError(
                f"{owner}.__init__: return_same_td=True cannot be used with a replay_buffer (got "
                "both; expected at most one). The buffer stores copies of each batch: drop "
                "return_same_td."
            )
        self.return_same_td = bool(return_same_td)
        self.options = options
        self.mp_start_method = method
        self.frames = 0
        self._busy: set[int] = set()  # workers with a batch in flight (async collector)
        self._storing = torch.device(options.storing_device) if options.storing_device else None
        per_worker = self._worker_frames(frames_per_batch)
        if weight_sync is None:
            has = policy_weights(policy) is not None
            weight_sync = SharedMemWeightSyncScheme() if has else NoWeightSyncScheme()
        self.weight_sync = weight_sync
        kwargs = {
            "frames_per_batch": per_worker,
            "max_frames_per_traj": max_frames_per_traj,
            "init_random_frames": -(-init_random_frames // self.num_workers),
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration_type,
            "env_device": options.env_device,
            "policy_device": options.policy_device,
        }
        self._start(fns, kwargs)

    # ------------------------------------------------------------------ start
    def _worker_frames(self, frames_per_batch: int) -> int:
        raise NotImplementedError

    def _start(self, fns: list[Callable[[], EnvBase]], kwargs: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context(self.mp_start_method)
        opts = self.options
        self._pool = WorkerPool(
            self._owner,
            ctx,
            num_threads=opts.num_threads,
            step_timeout=opts.batch_timeout,
            start_timeout=opts.start_timeout,
            shutdown_timeout=opts.shutdown_timeout,
            timeout_hint="Raise options.batch_timeout/options.start_timeout if collection is "
            "just slow.",
        )
        self._closed = False
        try:
            receivers = self.weight_sync.setup(self.policy, self.num_workers, ctx)
            payloads = [
                cloudpickle.dumps(WorkerSetup(fn, self.policy, kwargs, self.num_workers))
                for fn in fns
            ]
            args = [(p, r) for p, r in zip(payloads, receivers)]
            layouts = self._pool.start(collector_worker_main, args)
            self._allocate(layouts, kwargs["frames_per_batch"])
        except BaseException:
            self.shutdown()
            raise

    def _allocate(self, layouts: list[TensorDictBase], frames: int) -> None:
        for w, layout in enumerate(layouts[1:], 1):
            diff = _layout_difference(layouts[0], layout)
            if diff is not None:
                raise ValueError(
                    f"{self._owner}.__init__: worker {w} collects other data than worker 0 "
                    f"(got {diff}; expected the same keys, shapes and dtypes). Make every "
                    "create_env_fn build the same kind of env."
                )
        example = layouts[0]  # [*B, 1]
        env_batch = example.batch_size[:-1]
        steps = frames // max(env_batch.numel(), 1)
        n = self.num_workers
        buffer = example.expand(*env_batch, steps).unsqueeze(0).expand(n, *env_batch, steps)
        buffer = buffer.clone().zero_()
        ids = torch.arange(n).reshape(n, *([1] * (buffer.ndim - 1))).expand(buffer.batch_size)
        buffer.set(WORKER_KEY, ids.clone())
        buffer.share_memory_()
        for w in range(n):
            self._pool.send(w, "attach", (buffer,), share=True)
        self._pool.gather(range(n), "attach")
        self._buffer = buffer
        self._batch_view = TreeBuffer(buffer)
        self._row_views = [TreeBuffer(buffer[w]) for w in range(n)]
        # return_same_td: one TensorDict object per shared region, handed out every time
        self._same_batch = self._batch_view.view()
        self._same_rows = [row.view() for row in self._row_views]

    # ------------------------------------------------------------------ iteration
    def _next_batch(self) -> TensorDictBase:
        raise NotImplementedError

    def _live_pool(self, method: str) -> WorkerPool:
        if self._closed:
            raise RuntimeError(
                f"{self._owner}.{method}: the collector is shut down (got a call after "
                "shutdown() or a worker failure). Build a new collector."
            )
        return self._pool

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Around pool calls: a dead or hung worker (the pool shut down) closes the collector."""
        try:
            yield
        except (WorkerError, TimeoutError):
            if self._pool.failure is not None:
                self.shutdown()
            raise

    def _output(self, tree: TreeBuffer, same: TensorDictBase) -> TensorDictBase:
        """The yielded batch: ``same`` (the shared memory) with ``return_same_td``, else memory
        the caller owns (one batched clone, or the copy to ``storing_device``)."""
        storing = self._storing
        moves = storing is not None and storing != same.device
        if self.return_same_td or self.split_trajs:  # split_trajectories copies by itself
            return same.to(storing) if moves else same
        return tree.view().to(storing) if moves else tree.clone()

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        return iterate_batches(self, self._next_batch)

    # ------------------------------------------------------------------ weights and state
    def update_policy_weights_(
        self, weights: TensorDictBase | Mapping[str, torch.Tensor] | None = None
    ) -> None:
        """Publishes new policy weights to the workers through the weight sync scheme.

        Every batch whose collection starts after this returns runs with the new weights.

        Args:
            weights: a TensorDict shaped like ``TensorDict.from_module(policy)`` (a subset of
                entries is fine) or a ``state_dict``; ``None`` takes the current weights of the
                policy given to the constructor.
        """
        self._live_pool("update_policy_weights_")
        ref = policy_weights(self.policy)
        if ref is None:
            if weights is not None:
                raise ValueError(
                    f"{self._owner}.update_policy_weights_: the policy has no weights to update "
                    f"(got {type(self.policy).__name__}; expected an nn.Module). Pass no weights."
                )
            return
        new = ref if weights is None else as_weights(self._owner, weights, ref)
        self.weight_sync.send(new.detach())

    def _drain(self) -> None:
        """Waits for batches still being collected (the async collector's), dropping them."""

    def _ask_each(self, method: str, cmd: str, args_per_worker: Sequence[tuple]) -> list[Any]:
        pool = self._live_pool(method)
        with self._guard():
            self._drain()
            for w, args in enumerate(args_per_worker):
                pool.send(w, cmd, args)
            return pool.gather(range(self.num_workers), cmd)

    def set_seed(self, seed: int) -> int:
        """Seeds every worker with a distinct seed (chained through the workers' envs).

        Returns:
            The next seed of the chain.
        """
        pool = self._live_pool("set_seed")
        with self._guard():
            self._drain()
            for w in range(self.num_workers):
                pool.send(w, "set_seed", (seed,))
                (seed,) = pool.gather([w], "set_seed")
        return int(seed)

    def state_dict(self) -> dict[str, Any]:
        """The frame counter and every worker's collector state (frames, trajectory counter,
        policy weights, env state)."""
        states = self._ask_each("state_dict", "state_dict", [()] * self.num_workers)
        return {"frames": self.frames, "workers": states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned (same number of workers)."""
        workers = state["workers"]
        if len(workers) != self.num_workers:
            raise ValueError(
                f"{self._owner}.load_state_dict: the state holds {len(workers)} workers "
                f"(expected {self.num_workers}). Load it into a collector with as many workers."
            )
        self._ask_each("load_state_dict", "load_state_dict", [(s,) for s in workers])
        self.frames = int(state["frames"])

    # ------------------------------------------------------------------ lifecycle
    @property
    def worker_pids(self) -> list[int]:
        """The worker process ids."""
        return self._pool.pids if hasattr(self, "_pool") else []

    def shutdown(self) -> None:
        """Stops the workers (bounded by ``options.shutdown_timeout``, then killed) and frees
        the shared memory. Idempotent; also runs from ``__del__`` and ``with`` blocks."""
        if self._closed:
            return
        self._closed = True
        try:
            self._pool.shutdown()
        finally:
            self.weight_sync.close()
            self._buffer = self._batch_view = self._row_views = None  # type: ignore[assignment]
            self._same_batch = self._same_rows = None  # type: ignore[assignment]
