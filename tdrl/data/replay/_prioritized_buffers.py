"""Replay buffers built with a :class:`~tdrl.data.PrioritizedSampler`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._buffers import ReplayBuffer, make_component
from ._prioritized import PrioritizedSampler
from ._refuse import refuse_unsupported
from ._samplers import Sampler
from ._storages import ListStorage, Storage
from ._td_buffers import TensorDictReplayBuffer
from ._writers import Writer

__all__ = ["PrioritizedReplayBuffer", "TensorDictPrioritizedReplayBuffer"]


def _bounded(where: str, storage: Storage | Callable[[], Storage] | None) -> Storage:
    """The buffer's storage (``ListStorage(1000)`` by default, or built by a factory); it must
    have a size limit."""
    made = make_component(where, "storage", storage, Storage)
    storage = made if made is not None else ListStorage(1000)
    if not storage.bounded:
        raise ValueError(
            f"{where}: a prioritized buffer needs a storage with a size limit (got "
            "ListStorage(None); expected a max_size). Pass ListStorage(max_size)."
        )
    return storage


def _check_prioritized_args(where: str, dtype: Any, sampler_device: Any, sync: bool) -> None:
    refuse_unsupported(where, sampler_device=(sampler_device, (None, "cpu")), sync=(sync, True))
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"{where}: unsupported dtype (got {dtype!r}; expected torch.float32 or torch.float64). "
            "tdrl's sum tree always computes in float64; leave dtype at its default."
        )


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` with a :class:`~tdrl.data.PrioritizedSampler`.

    ``sample(return_info=True)`` returns ``(batch, info)``: ``info["index"]`` to pass back to
    :meth:`update_priority`, ``info["priority_weight"]`` to weight the loss (as TorchRL,
    ``sample()`` alone returns just the batch).

    Args:
        alpha: priority exponent (see :class:`~tdrl.data.PrioritizedSampler`).
        beta: importance-weight exponent.
        eps: added to priorities.
        dtype: TorchRL's sum-tree dtype; float32 (default) and float64 are accepted, tdrl's sum
            tree always computes in float64.
        storage: defaults to ``ListStorage(1000)``; the sampler tracks ``storage.max_size``.
        sampler: replaces the default ``PrioritizedSampler(storage.max_size, alpha, beta, eps)``.
        sampler_device, sync: TorchRL arguments; only ``None``/``"cpu"`` and ``True``.
        sample_unit, collate_fn, pin_memory, prefetch, transform, batch_size, dim_extend,
            delayed_init, transport, transport_options, writer, generator: as in
            :class:`ReplayBuffer` (``writer`` and ``generator`` are tdrl additions, last).

    Examples:
        >>> from tdrl.data import LazyTensorStorage, PrioritizedReplayBuffer
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(100), batch_size=8)
        >>> _ = rb.extend(torch.randn(20, 3))
        >>> data, info = rb.sample(return_info=True)
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
        dtype: torch.dtype = torch.float32,
        storage: Storage | Callable[[], Storage] | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        sample_unit: Any = None,
        sampler_device: Any = None,
        sync: bool = True,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        delayed_init: bool = False,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
        writer: Writer | Callable[[], Writer] | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        where = f"{type(self).__name__}.__init__"
        _check_prioritized_args(where, dtype, sampler_device, sync)
        storage = _bounded(where, storage)
        if sampler is None:
            sampler = PrioritizedSampler(storage.max_size, alpha, beta, eps)
        super().__init__(
            storage=storage,
            sampler=sampler,
            sample_unit=sample_unit,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            transform=transform,
            batch_size=batch_size,
            prefetch=prefetch,
            dim_extend=dim_extend,
            generator=generator,
            delayed_init=delayed_init,
            transport=transport,
            transport_options=transport_options,
        )


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
        sampler_device, sync: TorchRL arguments; only ``None``/``"cpu"`` and ``True``.
        sample_unit, collate_fn, pin_memory, prefetch, transform, batch_size, dim_extend,
            generator, shared, compilable, transport, transport_options, writer: as in
            :class:`~tdrl.data.ReplayBuffer` (``writer`` is a tdrl addition, last).

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
        priority_key: Any = "td_error",
        eps: float = 1e-8,
        storage: Storage | Callable[[], Storage] | None = None,
        sample_unit: Any = None,
        sampler_device: Any = None,
        sync: bool = True,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        reduction: str = "max",
        batch_size: int | None = None,
        dim_extend: int | None = None,
        generator: torch.Generator | None = None,
        shared: bool = False,
        compilable: bool = False,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
        writer: Writer | Callable[[], Writer] | None = None,
    ) -> None:
        where = f"{type(self).__name__}.__init__"
        _check_prioritized_args(where, torch.float32, sampler_device, sync)
        storage = _bounded(where, storage)
        super().__init__(
            priority_key=priority_key,
            storage=storage,
            sampler=PrioritizedSampler(storage.max_size, alpha, beta, eps, reduction=reduction),
            sample_unit=sample_unit,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            transform=transform,
            batch_size=batch_size,
            prefetch=prefetch,
            dim_extend=dim_extend,
            generator=generator,
            shared=shared,
            compilable=compilable,
            transport=transport,
            transport_options=transport_options,
        )
