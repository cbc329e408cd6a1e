"""Multi-process collectors: one :class:`Collector` per worker process, batches in shared memory.

Each worker builds its env and a copy of the policy, runs a dry step to learn the layout of a
batch and reports it; the parent allocates one ``[num_workers, *env.batch_size, T]`` buffer in
shared memory and hands every worker its row. From then on a worker answers a small "collect"
command by collecting a batch with its :class:`Collector` and copying it into its row: the pipes
only carry commands (and, with :class:`MultiProcessWeightSyncScheme`, weights).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDictBase

from tdrl.collectors._base import BaseCollector, iterate_batches
from tdrl.collectors._multi_setup import check_options, env_fns, layout_difference
from tdrl.collectors._settings import as_device, policy_scheme, resolve_policy
from tdrl.collectors._startup import materialize_lazy, warn_frame_counts
from tdrl.collectors._trajs import check_trajectory_args
from tdrl.collectors._unsupported import check_supported
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
from tdrl.envs.core._exploration_type import ExplorationType
from tdrl.errors import WorkerError

__all__ = ["MultiCollectorBase", "MultiCollectorOptions"]

Policy = Callable[[TensorDictBase], TensorDictBase]
Device = torch.device | str | int | None


@dataclass(frozen=True)
class MultiCollectorOptions:
    """Timeouts of the multi-process collectors (a tdrl addition; TorchRL has none).

    Attributes:
        start_timeout: seconds to wait for the workers to build env, policy and collector.
        batch_timeout: seconds to wait for a worker's answer to any command (one batch
            included); a worker past it is killed and ``TimeoutError`` is raised.
        shutdown_timeout: seconds ``shutdown`` waits for clean exits before killing.

    Examples:
        >>> MultiCollectorOptions(batch_timeout=30.0).batch_timeout
        30.0
    """

    start_timeout: float = 120.0
    batch_timeout: float = 300.0
    shutdown_timeout: float = 10.0


class MultiCollectorBase(BaseCollector):
    """What :class:`MultiSyncCollector` and :class:`MultiAsyncCollector` share (see them).

    Subclasses write ``_worker_frames`` (frames per worker batch) and ``_next_batch``.
    """

    def __init__(
        self,
        create_env_fn: Sequence[Callable[..., EnvBase]] | Callable[..., EnvBase],
        policy: Policy | None = None,
        *,
        num_workers: int | None = None,
        policy_factory: Callable[[], Policy] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Device = None,
        storing_device: Device = None,
        env_device: Device = None,
        policy_device: Device = None,
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        collector_class: Any = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        reset_when_done: bool = True,
        update_at_each_batch: bool = False,
        preemptive_threshold: float | None = None,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        cat_results: str | int | None = None,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        extend_buffer: bool = True,
        trust_policy: bool | None = None,
        compile_policy: bool | Mapping[str, Any] | None = None,
        cudagraph_policy: Any = None,
        no_cuda_sync: bool = False,
        weight_updater: Any = None,
        weight_sync_schemes: Mapping[str, WeightSyncScheme] | None = None,
        weight_recv_schemes: Any = None,
        track_policy_version: bool = False,
        worker_idx: int | None = None,
        trajs_per_batch: int | None = None,
        trajs_per_write: int | None = None,
        traj_format: str | None = None,
        init_fn: Any = None,
        auto_register_policy_transforms: bool | None = None,
        pre_collect_hook: Callable[[], Any] | None = None,
        post_collect_hook: Callable[[TensorDictBase], Any] | None = None,
        compact_obs: bool = False,
        return_same_td: bool = False,
        mp_start_method: str | None = None,
        options: MultiCollectorOptions | None = None,
    ) -> None:
        owner = type(self).__name__
        self._owner = owner
        self._closed = True  # until the workers run: shutdown() must then do nothing
        check_supported(
            f"{owner}.__init__",
            {
                "collector_class": collector_class,
                "reset_when_done": reset_when_done,
                "preemptive_threshold": preemptive_threshold,
                "num_threads": num_threads,
                "use_buffers": use_buffers,
                "extend_buffer": extend_buffer,
                "trust_policy": trust_policy,
                "cudagraph_policy": cudagraph_policy,
                "weight_updater": weight_updater,
                "weight_recv_schemes": weight_recv_schemes,
                "track_policy_version": track_policy_version,
                "worker_idx": worker_idx,
                "init_fn": init_fn,
                "auto_register_policy_transforms": auto_register_policy_transforms,
                "compact_obs": compact_obs,
            },
        )
        self.cat_results = self._check_cat_results(cat_results)
        self.traj_format = check_trajectory_args(
            f"{owner}.__init__", trajs_per_batch, trajs_per_write, traj_format, bool(split_trajs)
        )
        self.trajs_per_batch, self.trajs_per_write = trajs_per_batch, trajs_per_write
        fns = env_fns(owner, create_env_fn, num_workers, create_env_kwargs)
        if (
            not isinstance(frames_per_batch, int)
            or isinstance(frames_per_batch, bool)
            or frames_per_batch <= 0
        ):
            raise ValueError(
                f"{owner}.__init__: frames_per_batch must be a positive int (got "
                f"{frames_per_batch!r}). Pass the number of frames of a batch."
            )
        options = options or MultiCollectorOptions()
        method = mp_start_method or "spawn"
        check_options(owner, method, options)
        if return_same_td and replay_buffer is not None:
            raise ValueError(
                f"{owner}.__init__: return_same_td=True cannot be used with a replay_buffer (got "
                "both; expected at most one). The buffer stores copies of each batch: drop "
                "return_same_td."
            )
        self.num_workers = self._num_weight_workers = len(fns)
        super().__init__(pre_collect_hook=pre_collect_hook, post_collect_hook=post_collect_hook)
        self.policy = resolve_policy(f"{owner}.__init__", policy, policy_factory)
        self.frames_per_batch = frames_per_batch
        self.total_frames = -1 if total_frames is None else int(total_frames)
        init_random = int(init_random_frames or 0)
        warn_frame_counts(f"{owner}.__init__", self.total_frames, init_random, frames_per_batch)
        self.split_trajs = bool(split_trajs)
        self.reset_at_each_iter = bool(reset_at_each_iter)
        self.replay_buffer = replay_buffer
        self.postproc = postproc
        self.update_at_each_batch = bool(update_at_each_batch)
        self.return_same_td = bool(return_same_td)
        self.options = options
        self.num_sub_threads = int(num_sub_threads)
        self.mp_start_method = method
        self.frames = 0
        self._busy: set[int] = set()  # workers with a batch in flight (async collector)
        device_ = as_device(owner, "device", device)
        self._storing = as_device(owner, "storing_device", storing_device) or device_
        self.storing_device = self._storing
        per_worker = self._worker_frames(frames_per_batch)
        scheme = policy_scheme(f"{owner}.__init__", weight_sync_schemes)
        if scheme is None:
            has = policy_weights(self.policy) is not None
            scheme = SharedMemWeightSyncScheme() if has else NoWeightSyncScheme()
        self.weight_sync = scheme
        kwargs = {
            "frames_per_batch": per_worker,
            "max_frames_per_traj": max_frames_per_traj,
            "init_random_frames": -(-init_random // self.num_workers),
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration_type,
            "env_device": as_device(owner, "env_device", env_device),
            "policy_device": as_device(owner, "policy_device", policy_device) or device_,
            "set_truncated": set_truncated,
            "compile_policy": compile_policy,
            "no_cuda_sync": no_cuda_sync,
            "pre_collect_hook": pre_collect_hook,
            "post_collect_hook": post_collect_hook,
        }
        self._start(fns, kwargs, policy_factory)

    def _check_cat_results(self, cat_results: Any) -> str | int:
        if cat_results is None or cat_results == "stack":
            return "stack"
        if isinstance(cat_results, int) and not isinstance(cat_results, bool):
            return cat_results
        raise ValueError(
            f"{self._owner}.__init__: cat_results must be 'stack' or an int dim (got "
            f"{cat_results!r}). Pass None for 'stack'."
        )

    # ------------------------------------------------------------------ start
    def _worker_frames(self, frames_per_batch: int) -> int:
        raise NotImplementedError

    def _batch_workers(self) -> int:
        """How many workers' batches make one yielded batch."""
        raise NotImplementedError

    def _start(
        self, fns: list[Callable[[], EnvBase]], kwargs: dict[str, Any], factory: Any
    ) -> None:
        ctx = multiprocessing.get_context(self.mp_start_method)
        opts = self.options
        self._pool = WorkerPool(
            self._owner,
            ctx,
            num_threads=self.num_sub_threads,
            step_timeout=opts.batch_timeout,
            start_timeout=opts.start_timeout,
            shutdown_timeout=opts.shutdown_timeout,
            timeout_hint="Raise options.batch_timeout/options.start_timeout if collection is "
            "just slow.",
        )
        self._closed = False
        try:
            materialize_lazy(self.policy, fns[0])  # lazy layers exist before weights are shared
            receivers = self.weight_sync.setup(self.policy, self.num_workers, ctx)
            payloads = [
                cloudpickle.dumps(
                    WorkerSetup(
                        fn, None if factory else self.policy, kwargs, self.num_workers, factory
                    )
                )
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
            diff = layout_difference(layouts[0], layout)
            if diff is not None:
                raise ValueError(
                    f"{self._owner}.__init__: worker {w} collects other data than worker 0 "
                    f"(got {diff}; expected the same keys, shapes and dtypes). Make every "
                    "create_env_fn build the same kind of env."
                )
        example = layouts[0]  # [*B, 1]
        env_batch = example.batch_size[:-1]
        numel = max(env_batch.numel(), 1)
        steps = -(-frames // numel)  # the workers' Collectors round up, as TorchRL's
        if steps * numel != frames:
            warnings.warn(
                f"{self._owner}.__init__: the frames of a worker batch ({frames}) are not a "
                f"multiple of the env batch numel ({numel}): each worker batch holds "
                f"{steps * numel} frames.",
                UserWarning,
                stacklevel=4,
            )
        n = self.num_workers
        self.requested_frames_per_batch = steps * numel * self._batch_workers()
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
        moves = storing is not None and storing.type != "cpu"  # the shared memory is cpu
        if self.return_same_td or self.split_trajs:  # split_trajectories copies by itself
            return same.to(storing) if moves else same
        return tree.view().to(storing) if moves else tree.clone()

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """The batches until ``total_frames`` (what ``for batch in collector`` runs)."""
        return iterate_batches(self, self._locked_next_batch)

    def _locked_next_batch(self) -> TensorDictBase:
        with self._lock:
            batch = self._next_batch()
            self.frames += self.requested_frames_per_batch
            return batch

    # ------------------------------------------------------------------ weights and state
    def _push_weights(self, weights: Any, worker_ids: list[int] | None) -> None:
        """``update_policy_weights_``: publishes the weights (None: the current weights of the
        policy given to the constructor) to the workers ``worker_ids`` (None: all) through the
        weight sync scheme; every batch of theirs whose collection starts after this returns
        runs with them."""
        with self._lock:
            self._publish(weights, worker_ids)

    def _publish(self, weights: Any, worker_ids: list[int] | None) -> None:
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
        self.weight_sync.send(new.detach(), worker_ids)

    def _drain(self) -> None:
        """Waits for batches still being collected (the async collector's), dropping them."""

    def _ask_each(self, method: str, cmd: str, args_per_worker: Sequence[tuple]) -> list[Any]:
        pool = self._live_pool(method)
        with self._lock, self._guard():
            self._drain()
            for w, args in enumerate(args_per_worker):
                pool.send(w, cmd, args)
            return pool.gather(range(self.num_workers), cmd)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds every worker with a distinct seed (chained through the workers' envs; with
        ``static_seed`` every worker gets ``seed`` itself, as in TorchRL), then resets every
        env as TorchRL does: the next batch starts from the seeded resets. Each worker seeds
        its own torch generator with its seed as well.

        Returns:
            The next seed of the chain (``seed`` with ``static_seed``).
        """
        pool = self._live_pool("set_seed")
        with self._lock, self._guard():
            self._drain()
            for w in range(self.num_workers):
                pool.send(w, "set_seed", (seed, static_seed))
                (seed,) = pool.gather([w], "set_seed")
        self.reset()
        return int(seed)

    def state_dict(self) -> dict[str, Any]:
        """The frame counter and every worker's collector state (frames, trajectory counter,
        policy weights, env state)."""
        states = self._ask_each("state_dict", "state_dict", [()] * self.num_workers)
        return {"frames": self.frames, "workers": states}

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restores what ``state_dict`` returned (same number of workers); ``strict`` goes to
        the workers' env and policy ``load_state_dict``."""
        state = state_dict
        workers = state["workers"]
        if len(workers) != self.num_workers:
            raise ValueError(
                f"{self._owner}.load_state_dict: the state holds {len(workers)} workers "
                f"(expected {self.num_workers}). Load it into a collector with as many workers."
            )
        self._ask_each("load_state_dict", "load_state_dict", [(s, strict) for s in workers])
        self.frames = int(state["frames"])

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Resets the envs of the workers where ``reset_idx`` (one bool per worker; None:
        every worker) is true: their next batch starts from fresh trajectories with new ids.
        Batches still being collected are dropped first, and with ``trajs_per_batch`` the
        trajectories not yielded yet."""
        if reset_idx is None:
            reset_idx = [True] * self.num_workers
        if len(reset_idx) != self.num_workers:
            raise ValueError(
                f"{self._owner}.reset: reset_idx needs one bool per worker (got {len(reset_idx)} "
                f"for {self.num_workers} workers). Pass e.g. [True] * num_workers."
            )
        workers = [w for w, r in enumerate(reset_idx) if r]
        pool = self._live_pool("reset")
        if self._assembler is not None:
            self._assembler.flush()
        with self._lock, self._guard():
            self._drain()
            for w in workers:
                pool.send(w, "reset", ())
            pool.gather(workers, "reset")

    # ------------------------------------------------------------------ lifecycle
    @property
    def worker_pids(self) -> list[int]:
        """The worker process ids."""
        return self._pool.pids if hasattr(self, "_pool") else []

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stops the workers and frees the shared memory. Idempotent; also runs from
        ``__del__`` and ``with`` blocks.

        Args:
            timeout: seconds to wait for the background thread of :meth:`start`, then for
                clean exits before the workers are killed (None: until the thread stops,
                then ``options.shutdown_timeout``).
            close_env: must be True: the workers' envs close with them (as in TorchRL).
            raise_on_error: raise what stopping the workers raised; False swallows it.
        """
        if not close_env:
            raise ValueError(
                f"{self._owner}.shutdown: the workers' envs close with the workers (got "
                "close_env=False; expected True, as in TorchRL). Drop close_env."
            )
        if timeout is not None and not timeout >= 0:
            raise ValueError(
                f"{self._owner}.shutdown: timeout must be None or >= 0 seconds (got {timeout!r})."
            )
        if self._closed:
            return
        self._stop_background(timeout)
        self._closed = True
        try:
            self._pool.shutdown(timeout)
        except Exception:
            if raise_on_error:
                raise
        finally:
            self.weight_sync.close()
            self._buffer = self._batch_view = self._row_views = None  # type: ignore[assignment]
            self._same_batch = self._same_rows = None  # type: ignore[assignment]
