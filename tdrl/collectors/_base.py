"""What every collector shares: ``with``/``__del__`` shutdown, ``len`` and the batch iterator."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from tensordict import TensorDictBase

from tdrl.collectors._split import split_trajectories

__all__ = ["CollectorBase", "iterate_batches"]

_C = TypeVar("_C", bound="CollectorBase")


class CollectorBase:
    """``with`` blocks and garbage collection call ``shutdown``; ``len`` counts the batches.

    Subclasses set ``frames_per_batch`` and ``total_frames`` (``-1``: never stop).
    """

    frames_per_batch: int
    total_frames: int

    def shutdown(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        """The number of batches the iterator yields: ``ceil(total_frames / frames_per_batch)``.

        Raises:
            TypeError: the collector never stops (``total_frames`` is not positive), as in
                TorchRL.
        """
        if self.total_frames > 0:
            return -(-self.total_frames // self.frames_per_batch)
        raise TypeError(
            f"{type(self).__name__}.__len__: a collector without an end has no length (got "
            f"total_frames={self.total_frames}; expected a positive total_frames). Pass "
            "total_frames to the constructor, or count the batches yourself."
        )

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass


class _Iterated(Protocol):
    """What :func:`iterate_batches` reads of a collector."""

    frames: int
    total_frames: int
    split_trajs: bool
    postproc: Callable[[TensorDictBase], TensorDictBase] | None
    replay_buffer: Any


def iterate_batches(
    collector: _Iterated,
    next_batch: Callable[[], TensorDictBase],
    post_collect_hook: Callable[[TensorDictBase], Any] | None = None,
) -> Iterator[TensorDictBase | None]:
    """The collectors' ``__iter__``: batches from ``next_batch`` until ``total_frames``.

    Each batch is split into trajectories (``split_trajs``), post-processed (``postproc``),
    shown to ``post_collect_hook`` and either yielded or, with a ``replay_buffer``, written to
    it (then ``None`` is yielded).
    """
    while collector.total_frames < 0 or collector.frames < collector.total_frames:
        batch = next_batch()
        if collector.split_trajs:
            batch = split_trajectories(batch)
        if collector.postproc is not None:
            batch = collector.postproc(batch)
        if post_collect_hook is not None:
            post_collect_hook(batch)
        if collector.replay_buffer is not None:
            collector.replay_buffer.extend(batch.reshape(-1))
            yield None
        else:
            yield batch
