"""MultiSyncCollector: every worker contributes to each batch."""

from __future__ import annotations

import warnings

import torch
from tensordict import TensorDictBase

from tdrl.collectors._multi import MultiCollectorBase

__all__ = ["MultiSyncCollector"]


class MultiSyncCollector(MultiCollectorBase):
    """Collects with one :class:`Collector` per worker process; each batch holds every worker's.

    A batch has batch size ``[num_workers, *env.batch_size, T]`` (the workers' batches stacked
    on a new leading dim; ``batch.flatten(0, 1)`` concatenates them) with
    ``T = frames_per_batch / (num_workers * env.batch_size.numel())``, rounded up (with a
    warning) as in TorchRL; :attr:`requested_frames_per_batch` holds the frames of a batch.
    The workers collect at
    the same time and wait for the next request: the batch after ``update_policy_weights_()``
    is fully collected with the new weights. The workers write into one shared-memory batch; a
    yielded batch is a copy of it that the caller owns (``list(collector)`` keeps every batch),
    or, with ``return_same_td=True``, the shared batch itself (the same TensorDict each time,
    overwritten when the next batch is requested; one copy less). Trajectory ids at
    ``("collector", "traj_ids")`` are unique across workers and batches (worker ``w`` uses the
    ids ``w, w + n, w + 2n, ...``); ``("collector", "worker_id")`` tells the worker.

    Each worker builds its env from ``create_env_fn[w]`` (cloudpickled: lambdas are fine) and
    receives a copy of the policy by value; policy weights then reach the workers through
    the ``weight_sync_schemes``. A policy with lazy layers is run once here first, on zeros
    shaped like the data of an env built for that (TorchRL fails on such a policy), so that
    every worker gets the same weights. Each worker's :class:`Collector` resets its env and
    runs the policy once at construction. Workers are non-daemonic processes, so their envs
    may start processes themselves (e.g. a :class:`~tdrl.envs.ParallelEnv`).

    ``trajs_per_batch`` assembles whole trajectories in this process, from every worker's
    batches (see :class:`Collector`); with a ``replay_buffer`` they are written to it flat.
    :meth:`start` collects in a background thread of this process into the
    ``replay_buffer``.

    Failures: an exception in a worker raises :class:`~tdrl.errors.WorkerError` naming the
    worker with its remote traceback (the workers keep running); a worker that dies raises
    ``WorkerError`` with its exit code or signal as soon as it is noticed, one that does not
    answer within ``options.batch_timeout`` is killed and ``TimeoutError`` is raised; in both
    cases the collector shuts down. Workers exit by themselves within about a second when this
    process dies. ``shutdown()`` is idempotent and bounded, also runs from ``__del__``, ``with``
    blocks and at interpreter exit, and leaves no process or shared memory behind.

    The signature is TorchRL's (then tdrl's ``return_same_td``, ``mp_start_method`` and
    ``options``). Arguments tdrl cannot honour are accepted at their defaults only and raise
    ``ValueError`` otherwise: ``collector_class``, ``reset_when_done``,
    ``preemptive_threshold``, ``num_threads``, ``use_buffers`` (False), ``extend_buffer``
    (False), ``trust_policy`` (False), ``cudagraph_policy``, ``weight_updater``,
    ``weight_recv_schemes``, ``track_policy_version``, ``worker_idx``, ``init_fn``,
    ``auto_register_policy_transforms`` and ``compact_obs``.

    Args:
        create_env_fn: one env factory per worker (their count is the number of workers), or
            one factory with ``num_workers``.
        policy: a TensorDict-to-TensorDict callable; random actions when None.
        num_workers: the number of workers when ``create_env_fn`` is one factory.
        policy_factory: builds the policy in each worker (and once here, the weights'
            reference), instead of sending ``policy`` by value.
        frames_per_batch: frames per batch over all workers (rounded up to a multiple of
            ``num_workers * env.batch_size.numel()``).
        total_frames: stop after this many frames (-1 or None: never); ``len(collector)`` is
            ``ceil(total_frames / requested_frames_per_batch)``.
        device: the default of ``storing_device`` and ``policy_device``.
        storing_device: device of the yielded batches (collected in shared cpu memory; another
            device costs the copy there instead of the clone).
        env_device, policy_device: as for :class:`Collector`, in each worker.
        create_env_kwargs: keyword arguments of the env factories (one dict, or one per worker).
        max_frames_per_traj: a positive value adds a ``StepCounter`` to each worker's env
            and truncates longer trajectories (as :class:`Collector`; None, 0 or negative: no
            limit).
        init_random_frames: random actions for the first frames (split evenly over workers,
            counted in whole worker batches).
        reset_at_each_iter: reset every env at the start of each batch.
        postproc: a callable applied to each batch (in this process) before it is yielded.
        split_trajs: yield ``[num_trajs, max_len]`` padded trajectories (see
            :func:`split_trajectories`).
        exploration_type: the exploration type the policy runs under in the workers.
        update_at_each_batch: call ``update_policy_weights_()`` before each batch.
        num_sub_threads: torch intra-op threads per worker.
        cat_results: ``"stack"`` (None: the default) stacks the workers on a new leading dim;
            an int concatenates their batches along that dim.
        set_truncated, compile_policy, no_cuda_sync, pre_collect_hook, post_collect_hook: as
            for :class:`Collector`, applied in each worker.
        trajs_per_batch, trajs_per_write, traj_format: as for :class:`Collector` (assembled
            in this process).
        replay_buffer: if given, each batch is written to it and the iterator yields ``None``.
        weight_sync_schemes: ``{"policy": scheme}``: how ``update_policy_weights_`` reaches the
            workers. Default: :class:`SharedMemWeightSyncScheme` for an ``nn.Module`` policy
            with weights, :class:`NoWeightSyncScheme` otherwise.
        return_same_td: yield the shared batch memory itself instead of a copy the caller owns.
        mp_start_method: ``"spawn"`` (default), ``"fork"`` or ``"forkserver"`` (the global
            start method is never changed).
        options: timeouts (:class:`MultiCollectorOptions`).

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> with MultiSyncCollector(
        ...     [CountingEnv] * 2, frames_per_batch=8, total_frames=16, mp_start_method="fork"
        ... ) as collector:
        ...     shapes = [batch.batch_size for batch in collector]
        >>> shapes
        [torch.Size([2, 4]), torch.Size([2, 4])]
    """

    def _batch_workers(self) -> int:
        return self.num_workers

    def _worker_frames(self, frames_per_batch: int) -> int:
        per_worker = -(-frames_per_batch // self.num_workers)
        if per_worker * self.num_workers != frames_per_batch:  # rounded up, as TorchRL
            warnings.warn(
                f"MultiSyncCollector.__init__: frames_per_batch ({frames_per_batch}) is not a "
                f"multiple of the number of workers ({self.num_workers}): each worker collects "
                f"{per_worker} frames.",
                UserWarning,
                stacklevel=3,
            )
        return per_worker

    def _next_batch(self) -> TensorDictBase:
        pool = self._live_pool("__iter__")
        workers = range(self.num_workers)
        if self.update_at_each_batch:
            self.update_policy_weights_()
        with self._guard():
            for w in workers:
                pool.send(w, "collect", (self.weight_sync.message(w),))
            pool.gather(workers, "collect")
        batch = self._output(self._batch_view, self._same_batch)
        if self.cat_results != "stack":  # TorchRL's cat_results=dim: workers concatenated
            return torch.cat(batch.unbind(0), int(self.cat_results))
        return batch
