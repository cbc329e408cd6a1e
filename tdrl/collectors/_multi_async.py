"""MultiAsyncCollector: yields the batch of whichever worker finishes first."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.collectors._multi import MultiCollectorBase

__all__ = ["MultiAsyncCollector"]


class MultiAsyncCollector(MultiCollectorBase):
    """Collects with one :class:`Collector` per worker process and yields each worker's batch as
    soon as it is ready.

    Every batch comes from one worker: batch size ``[*env.batch_size, T]`` with
    ``T = frames_per_batch / env.batch_size.numel()``, tagged with the worker at
    ``("collector", "worker_id")`` (also in :attr:`last_worker`). The other workers keep
    collecting while a batch is used. A yielded batch is a copy the caller owns, and the
    worker that collected it starts its next batch at once; with ``return_same_td=True`` (or
    ``split_trajs``) the batch is the worker's shared-memory row itself (the same TensorDict for
    each worker), and that worker starts its next batch only when the next one is requested.
    Batches already being collected when ``update_policy_weights_()``
    runs finish with the old weights; every batch started afterwards uses the new ones.
    Commands other than collection (``set_seed``, ``state_dict``, ...) first wait for the
    batches in flight and drop them.

    Trajectory ids, failures, shutdown and every argument are as for
    :class:`MultiSyncCollector`, except ``frames_per_batch``: the frames of one batch, collected
    by one worker.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> with MultiAsyncCollector(
        ...     [CountingEnv] * 2, frames_per_batch=4, total_frames=8, mp_start_method="fork"
        ... ) as collector:
        ...     shapes = [batch.batch_size for batch in collector]
        >>> shapes
        [torch.Size([4]), torch.Size([4])]
    """

    last_worker: int | None = None

    def _check_cat_results(self, cat_results: Any) -> str | int:
        if cat_results is not None and cat_results != "stack":
            raise ValueError(
                f"{self._owner}.__init__: cat_results is for MultiSyncCollector (got "
                f"{cat_results!r}; expected None). Each batch of this collector comes from one "
                "worker: drop cat_results."
            )
        return "stack"

    def _batch_workers(self) -> int:
        return 1

    def _worker_frames(self, frames_per_batch: int) -> int:
        return frames_per_batch

    def _next_batch(self) -> TensorDictBase:
        pool = self._live_pool("__iter__")
        if self.update_at_each_batch:
            self.update_policy_weights_()
        with self._guard():
            for w in range(self.num_workers):
                if w not in self._busy:
                    pool.send(w, "collect", (self.weight_sync.message(w),))
                    self._busy.add(w)
            w, ok, value = pool.wait_any(sorted(self._busy), "collect")
            self._busy.discard(w)
            if not ok:
                pool.raise_remote(w, value, "collect")
        self.last_worker = w
        batch = self._output(self._row_views[w], self._same_rows[w])
        after = self.frames + self.requested_frames_per_batch  # counted once this returns
        more = self.total_frames < 0 or after < self.total_frames
        if more and not (self.return_same_td or self.split_trajs):
            # the caller owns a copy: the worker may overwrite its row with the next batch now
            with self._guard():
                pool.send(w, "collect", (self.weight_sync.message(w),))
                self._busy.add(w)
        return batch

    def _drain(self) -> None:
        if self._busy:
            busy, self._busy = sorted(self._busy), set()
            self._pool.gather(busy, "collect")
