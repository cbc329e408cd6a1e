"""Replay buffers for TensorDict data: samples carry ``"index"`` and the sampler's extras."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from ._buffers import ReplayBuffer
from ._prioritized import PrioritizedSampler
from ._storages import Batch

__all__ = ["TensorDictReplayBuffer"]

_REDUCE = {
    "max": lambda x: x.amax(-1),
    "min": lambda x: x.amin(-1),
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "median": lambda x: x.median(-1).values,
}
# Entries a sample adds; they are not stored when a sample is extended back into a buffer.
_SAMPLE_KEYS = ("index", "priority_weight")


def _element_index(index: torch.Tensor) -> torch.Tensor:
    """One flat index per sampled element: samples of elements with batch dims (see
    :class:`~tdrl.data.TensorStorage`) repeat the index over those dims."""
    while index.dim() > 1:
        index = index[..., 0]
    return index


def _reduce_priority(priority: torch.Tensor, index: torch.Tensor, reduction: str) -> torch.Tensor:
    """Reduces the dims of ``priority`` beyond the dims of ``index`` (e.g. ``[B, 1] -> [B]``)."""
    if priority.shape == index.shape:
        return priority
    if priority.shape[: index.dim()] != index.shape:
        raise ValueError(
            "TensorDictReplayBuffer.update_tensordict_priority: the priority does not match the "
            f"index (got priority {list(priority.shape)}, index {list(index.shape)}; expected the "
            "priority shape to start with the index shape). Compute one priority per element."
        )
    flat = priority.reshape(*index.shape, -1)
    if not flat.is_floating_point():
        flat = flat.double()
    if flat.shape[-1] == 1:  # e.g. [B, 1]: every reduction of one value is that value
        return flat.squeeze(-1)
    return _REDUCE[reduction](flat)


class TensorDictReplayBuffer(ReplayBuffer):
    """A replay buffer for TensorDicts whose samples carry their storage index.

    A sample is a TensorDict of batch size ``[batch_size, *element_batch]`` (elements stored
    with batch dims keep them, as in TorchRL) holding the stored entries plus
    ``"index"`` (flat storage indices; for ``ndim > 1`` storages TorchRL's ``[batch, ndim]``
    coordinates, see :meth:`~tdrl.data.TensorStorage.unravel_index`) and the sampler's extras
    (``"priority_weight"`` with a :class:`~tdrl.data.PrioritizedSampler`), both repeated over
    the element batch dims. Extending with a
    sample drops those two entries. With a prioritized sampler, data that holds ``priority_key``
    is added with those priorities instead of the maximum.

    Args:
        priority_key: the entry :meth:`update_tensordict_priority` reads priorities from.
        **kwargs: every argument of :class:`~tdrl.data.ReplayBuffer` (``storage``,
            ``sampler``, ``writer``, ``collate_fn``, ``transform``, ``batch_size``, ...).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.randn(10, 3), "next": {"obs": torch.randn(10, 3)}}, [10]))
        >>> sample = rb.sample()
        >>> sample.batch_size, sorted(sample.keys())
        (torch.Size([4]), ['index', 'next', 'obs'])
    """

    def __init__(self, *, priority_key: Any = "td_error", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.priority_key = priority_key

    def extend(
        self, tensordicts: TensorDictBase, *, update_priority: bool | None = None
    ) -> torch.Tensor:
        """Adds a TensorDict batch and returns the indices of its elements (as
        :meth:`~tdrl.data.ReplayBuffer.extend`).

        Args:
            tensordicts: the batch (batch dims ``[N]``, or ``[env, time]`` for ``ndim=2``).
            update_priority: with a prioritized sampler, whether the data's ``priority_key``
                entry sets the priorities of the new elements (``None`` means ``True``, as
                TorchRL); with ``False`` they get the largest priority seen.

        Examples:
            >>> from tensordict import TensorDict
            >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
            >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
            >>> rb.extend(TensorDict({"obs": torch.zeros(3)}, [3]), update_priority=False)
            tensor([0, 1, 2])
        """
        with self._lock:
            index = self._write(
                tensordicts, single=False, update_priority=update_priority is not False
            )
            return self._public_write_index(index)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a TensorDict batch that carries ``"index"`` (and the sampler's extras).

        Args:
            batch_size: the number of elements; defaults to the constructor's ``batch_size``.
            return_info: also return the info dict.

        Examples:
            >>> from tensordict import TensorDict
            >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
            >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend(TensorDict({"obs": torch.zeros(3)}, [3]))
            >>> rb.sample(2)["index"].shape
            torch.Size([2])
        """
        return super().sample(batch_size, return_info)

    def _prepare_data(self, data: Any) -> Any:
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__}.extend: the data is a {type(data).__name__} (expected a "
                "TensorDict). Wrap it in a TensorDict or use ReplayBuffer."
            )
        keys = data.keys()
        drop = [k for k in _SAMPLE_KEYS if k in keys]
        return data.exclude(*drop) if drop else data

    def _after_write(self, batch: Batch, index: torch.Tensor, keep: Any) -> None:
        if not isinstance(self._sampler, PrioritizedSampler):
            return
        data = batch.data
        if self.priority_key not in data.keys(True, True):
            return
        priority = _reduce_priority(data.get(self.priority_key), index, self._sampler.reduction)
        if keep is not None:
            index, priority = index[..., keep], priority[..., keep]
        self._sampler.update_priority(index, priority)

    def _public_sample_index(self, index: torch.Tensor) -> Any:
        # TorchRL stacks the coordinates of an ndim > 1 storage: "index" is [batch, ndim].
        if self._storage.ndim == 1:
            return index
        return self._storage.unravel_index(index)  # type: ignore[attr-defined]

    def _attach(self, data: Any, info: dict[str, Any]) -> Any:
        # Indices and weights follow the data to its device (the loss multiplies them).
        device = getattr(self._storage, "device", None)
        move = device is not None and device.type != "cpu"
        shape = data.batch_size
        for key, value in info.items():
            if move:
                value = value.to(device, non_blocking=True)
            coords = self._storage.ndim if key == "index" and self._storage.ndim > 1 else 0
            lead = value.dim() - (1 if coords else 0)
            try:
                if lead < len(shape):  # elements with batch dims: one value per entry, as TorchRL
                    rest = (coords,) if coords else ()
                    value = value.view(
                        *value.shape[:lead], *(1,) * (len(shape) - lead), *rest
                    ).expand(*shape, *rest)
                data.set(key, value)
            except RuntimeError as err:
                raise RuntimeError(
                    f"{type(self).__name__}.sample: cannot write {key!r} into the sample (got "
                    f"{key!r} of shape {list(value.shape)} for a sample of batch size "
                    f"{list(shape)}; expected the sample to keep the sampled batch's leading "
                    "dims). A transform probably changed the batch size: apply it to the sample "
                    "yourself, or use a ReplayBuffer with sample(return_info=True)."
                ) from err
        return data

    def _with_time_slots(self, data: Any) -> Any:
        # TorchRL's TensorDict writer stores the time slot of every step: rb[:] shows it.
        ndim, shape = self._storage.ndim, data.batch_size
        slots = torch.arange(shape[ndim - 1])
        view = (*(1,) * (ndim - 1), -1, *(1,) * (len(shape) - ndim))
        return data.set("index", slots.view(view).expand(shape))

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Updates priorities from a (sampled) TensorDict: ``data[priority_key]`` at ``data["index"]``.

        Extra priority dims (for instance ``[B, 1]`` or per-agent values) are reduced with the
        sampler's ``reduction``.

        Raises:
            KeyError: if ``"index"`` or ``priority_key`` is missing.

        Examples:
            >>> from tensordict import TensorDict
            >>> from tdrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
            >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10), batch_size=4)
            >>> _ = rb.extend(TensorDict({"obs": torch.randn(6, 2)}, [6]))
            >>> sample = rb.sample()
            >>> sample["td_error"] = torch.rand(4, 1)
            >>> rb.update_tensordict_priority(sample)
        """
        for key in ("index", self.priority_key):
            if isinstance(data.get(key, None), TensorDictBase | None):  # no leaf there
                keys = list(data.keys(True, True))
                raise KeyError(
                    f"{type(self).__name__}.update_tensordict_priority: no {key!r} entry (got keys "
                    f"{keys}). Pass a sample of this buffer with its {self.priority_key!r} entry set."
                )
        if not isinstance(self._sampler, PrioritizedSampler):
            self.update_priority(data.get("index"), data.get(self.priority_key))  # raises
            return
        where = f"{type(self).__name__}.update_tensordict_priority"
        index = _element_index(self._flat_index(data.get("index"), where))
        priority = _reduce_priority(data.get(self.priority_key), index, self._sampler.reduction)
        self.update_priority(index, priority)
