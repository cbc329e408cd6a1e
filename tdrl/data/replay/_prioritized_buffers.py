"""Replay buffers built with a :class:`~tdrl.data.PrioritizedSampler`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._buffers import ReplayBuffer
from ._prioritized import PrioritizedSampler
from ._storages import ListStorage, Storage
from ._td_buffers import TensorDictReplayBuffer
from ._writers import Writer

__all__ = ["PrioritizedReplayBuffer", "TensorDictPrioritizedReplayBuffer"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` with a :class:`~tdrl.data.PrioritizedSampler`.

    :meth:`sample` returns ``(batch, info)`` by default: ``info["index"]`` to pass back to
    :meth:`update_priority`, ``info["priority_weight"]`` to weight the loss.

    Args:
        alpha: priority exponent (see :class:`~tdrl.data.PrioritizedSampler`).
        beta: importance-weight exponent.
        eps: added to priorities.
        storage: defaults to ``ListStorage(1000)``; the sampler tracks ``storage.max_size``.
        writer, transform, batch_size, prefetch, generator: as in :class:`ReplayBuffer`.

    Examples:
        >>> from tdrl.data import LazyTensorStorage, PrioritizedReplayBuffer
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(100), batch_size=8)
        >>> _ = rb.extend(torch.randn(20, 3))
        >>> data, info = rb.sample()
        >>> rb.update_priority(info["index"], torch.rand(8))
        >>> sorted(info)
        ['index', 'priority_weight']
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        storage: Storage | None = None,
        writer: Writer | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        prefetch: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        storage = storage if storage is not None else ListStorage(1000)
        super().__init__(
            storage=storage,
            sampler=PrioritizedSampler(storage.max_size, alpha, beta, eps),
            writer=writer,
            transform=transform,
            batch_size=batch_size,
            prefetch=prefetch,
            generator=generator,
        )

    def sample(self, batch_size: int | None = None, *, return_info: bool = True) -> Any:
        """Samples ``(batch, info)`` (just the batch with ``return_info=False``)."""
        return super().sample(batch_size, return_info=return_info)


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A :class:`TensorDictReplayBuffer` with a :class:`~tdrl.data.PrioritizedSampler`.

    Samples carry ``"index"`` and ``"priority_weight"``; after computing the loss, set
    ``sample[priority_key]`` (for instance the TD error) and call
    :meth:`update_tensordict_priority`.

    Args:
        alpha: priority exponent (see :class:`~tdrl.data.PrioritizedSampler`).
        beta: importance-weight exponent.
        eps: added to priorities.
        reduction: how extra priority dims are reduced.
        priority_key: the priority entry (default ``"td_error"``).
        storage: defaults to ``ListStorage(1000)``; the sampler tracks ``storage.max_size``.
        writer, transform, batch_size, prefetch, generator: as in :class:`~tdrl.data.ReplayBuffer`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(100), batch_size=8)
        >>> _ = rb.extend(TensorDict({"obs": torch.randn(20, 3)}, [20]))
        >>> sample = rb.sample()
        >>> sample["td_error"] = sample["obs"].abs().sum(-1)
        >>> rb.update_tensordict_priority(sample)
        >>> sample["priority_weight"].shape
        torch.Size([8])
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        reduction: str = "max",
        priority_key: Any = "td_error",
        storage: Storage | None = None,
        writer: Writer | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        prefetch: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        storage = storage if storage is not None else ListStorage(1000)
        super().__init__(
            priority_key=priority_key,
            storage=storage,
            sampler=PrioritizedSampler(storage.max_size, alpha, beta, eps, reduction),
            writer=writer,
            transform=transform,
            batch_size=batch_size,
            prefetch=prefetch,
            generator=generator,
        )
