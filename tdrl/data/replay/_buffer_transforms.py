"""The transforms of a replay buffer, indexing through them, and pinning its output."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from ._samplers import Sampler
from ._storages import Storage

__all__ = ["BufferIndexing", "TransformChain", "first_element", "pin", "select_first"]


class TransformChain:
    """The ordered transforms of a buffer (TorchRL's buffer ``Compose``).

    Sampled data goes through every transform in order. Written data (``extend``/``add``) goes
    through the inverse maps in reverse order: ``t.inv(data)`` for transforms that have an
    ``inv`` method (tdrl ``Transform`` objects; identity unless they have ``in_keys_inv``),
    nothing for plain callables. A transform appended with ``invert=True`` swaps the two: its
    forward call runs on written data and its ``inv`` (if any) on sampled data.

    Examples:
        >>> chain = TransformChain()
        >>> chain.insert(0, lambda x: x + 1, invert=False)
        >>> chain.insert(1, lambda x: x * 10, invert=False)
        >>> chain(torch.tensor(1)), len(chain)
        (tensor(20), 2)
    """

    def __init__(self) -> None:
        self._items: list[tuple[Callable[[Any], Any], bool]] = []

    def insert(self, index: int, transform: Callable[[Any], Any], *, invert: bool) -> None:
        """Inserts ``transform`` before position ``index`` (``len(self)`` appends)."""
        if not callable(transform):
            raise TypeError(
                f"ReplayBuffer.append_transform: the transform is not callable (got "
                f"{type(transform).__name__}; expected a Transform or a callable). Pass a "
                "Transform or a function of the sampled data."
            )
        if isinstance(transform, torch.nn.Module):
            transform.eval()  # as TorchRL: buffer transforms run in eval mode
        self._items.insert(index, (transform, bool(invert)))

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Callable[[Any], Any]]:
        return iter(t for t, _ in self._items)

    def __getitem__(self, index: int) -> Callable[[Any], Any]:
        return self._items[index][0]

    def __call__(self, data: Any) -> Any:
        """Applies the sample-side maps in order."""
        for transform, invert in self._items:
            if not invert:
                data = transform(data)
            elif callable(getattr(transform, "inv", None)):
                data = transform.inv(data)  # type: ignore[attr-defined]
        return data

    def inv(self, data: Any) -> Any:
        """Applies the write-side maps, last transform first."""
        for transform, invert in reversed(self._items):
            if invert:
                data = transform(data)
            elif callable(getattr(transform, "inv", None)):
                data = transform.inv(data)  # type: ignore[attr-defined]
        return data


class BufferIndexing:
    """The transform plumbing and the TorchRL indexing of :class:`~tdrl.data.ReplayBuffer`.

    Examples:
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> isinstance(ReplayBuffer(storage=LazyTensorStorage(4)), BufferIndexing)
        True
    """

    _storage: Storage
    _sampler: Sampler
    _transforms: TransformChain
    _lock: contextlib.AbstractContextManager[Any]  # a thread lock, or ProcessShared

    def __len__(self) -> int:
        return len(self._storage)

    def _read(self, index: torch.Tensor) -> Any:
        raise NotImplementedError

    def _attach(self, data: Any, info: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _with_time_slots(self, data: Any) -> Any:
        """Hook for ``rb[:]`` of ``ndim > 1`` storages (TensorDict buffers add ``"index"``)."""
        return data

    @property
    def transform(self) -> Callable[[Any], Any] | None:
        """The transform applied to sampled batches: the only one, or a chain of several."""
        if not len(self._transforms):
            return None
        return self._transforms[0] if len(self._transforms) == 1 else self._transforms

    def append_transform(self, transform: Callable[[Any], Any], *, invert: bool = False) -> Any:
        """Adds a transform after the others and returns the buffer (as TorchRL).

        Sampled data (and :meth:`__getitem__`) goes through the transforms in order; written
        data goes through their inverse maps (``transform.inv`` of tdrl Transforms) in reverse
        order. With ``invert=True`` the transform's forward call runs on written data instead.

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10)).append_transform(lambda x: x * 10)
            >>> _ = rb.extend(torch.arange(3))
            >>> rb[2], rb.storage.get(torch.tensor([2]))
            (tensor(20), tensor([2]))
        """
        return self.insert_transform(len(self._transforms), transform, invert=invert)

    def insert_transform(
        self, index: int, transform: Callable[[Any], Any], *, invert: bool = False
    ) -> Any:
        """Inserts a transform at position ``index`` and returns the buffer (as TorchRL).

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=lambda x: x + 1)
            >>> _ = rb.insert_transform(0, lambda x: x * 10).extend(torch.arange(3))
            >>> rb[1]
            tensor(11)
        """
        self._transforms.insert(index, transform, invert=invert)
        return self

    def __getitem__(self, index: Any) -> Any:
        """Reads stored elements by position (``0 .. len - 1``), transforms applied (TorchRL).

        ``index`` is an int (one element, without a batch dim), a slice, a 1-D tensor or list of
        positions (negative ones count from the end), or a TensorDict key (``rb["obs"]`` is
        ``rb[:]["obs"]``). Nothing is sampled. As in TorchRL, TensorDict buffers add each
        element's ``"index"``.

        With an ``ndim > 1`` storage, ``rb[:]`` is every written step in the data's layout,
        ``[*env, time]`` (time slots in storage order), and ``rb[index]`` is ``rb[:][index]``
        (it selects envs), as TorchRL.

        Raises:
            IndexError: if a position is outside ``[-len, len)``.

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend({"obs": torch.arange(5)})
            >>> rb[1]["obs"], rb[-2:]["obs"], rb[[0, 3]]["obs"]
            (tensor(1), tensor([3, 4]), tensor([0, 3]))
        """
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):
            return self[:][index]
        if self._storage.ndim > 1:
            data = self._steps(index)
        else:
            positions, single = self._positions(index, "__getitem__")
            if not positions.numel():
                raise IndexError(
                    f"{type(self).__name__}.__getitem__: empty selection (got {index!r} with "
                    f"len={len(self)}). Select at least one element."
                )
            with self._lock:
                if single:
                    data = first_element(self._storage.get(positions))
                else:
                    data = self._read(positions)
            data = self._attach(data, {"index": positions[0] if single else positions})
        return self._transforms(data) if len(self._transforms) else data

    def _steps(self, index: Any) -> Any:
        """``rb[index]`` of an ``ndim > 1`` storage: ``rb[:]`` laid out ``[*env, time]``, then
        ``index`` applied to its first dim."""
        with self._lock:
            if not len(self._storage):
                raise IndexError(
                    f"{type(self).__name__}.__getitem__: the buffer is empty (got {index!r} with "
                    "len=0). Extend it first."
                )
            data = self._with_time_slots(self._storage.get_steps())  # type: ignore[attr-defined]
        if isinstance(index, slice) and index == slice(None):
            return data
        if isinstance(index, bool) or not isinstance(
            index, (int, slice, list, range, torch.Tensor)
        ):
            raise TypeError(
                f"{type(self).__name__}.__getitem__: invalid index (got {type(index).__name__}; "
                "expected an int, a slice, a 1-D tensor or list of env positions, or a key). Fix "
                "the index."
            )
        return select_first(data, list(index) if isinstance(index, range) else index)

    def __setitem__(self, index: Any, value: Any) -> None:
        """Overwrites stored elements by position (``0 .. len - 1``), as TorchRL.

        ``index`` is an int (``value`` is one element) or a slice, list or 1-D tensor of
        positions (``value`` holds one row per position). The value goes through the inverse
        transforms, as written data does, and the sampler is told the elements changed (a
        prioritized sampler gives them the largest priority, as new data).

        Raises:
            IndexError: if a position is outside ``[-len, len)``.
            TypeError: for a key index (``rb["obs"] = ...``): write whole elements instead.

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend(torch.arange(4))
            >>> rb[1] = torch.tensor(10)
            >>> rb[2:] = torch.tensor([20, 30])
            >>> rb[:]
            tensor([ 0, 10, 20, 30])
        """
        if isinstance(index, str) or (isinstance(index, tuple) and index):
            raise TypeError(
                f"{type(self).__name__}.__setitem__: writing one entry of every element is not "
                f"supported (got key {index!r}; expected an int, a slice or positions). Read the "
                "elements, change the entry and write them back with rb[positions] = data."
            )
        positions, single = self._positions(index, "__setitem__")
        if len(self._transforms):
            value = self._transforms.inv(value)
        with self._lock:
            storage = self._storage
            if storage.ndim != 1:
                raise TypeError(
                    f"{type(self).__name__}.__setitem__: positions of an ndim={storage.ndim} "
                    "storage are not writable (got a [env, time] layout; expected ndim=1). Use "
                    "storage.set(time_slots, data)."
                )
            storage.set(int(positions[0]) if single else positions, value)
            self._sampler.add(storage, positions)

    def _positions(self, index: Any, method: str) -> tuple[torch.Tensor, bool]:
        n, where = len(self), f"{type(self).__name__}.{method}"
        if isinstance(index, slice):
            return torch.arange(n)[index], False
        if isinstance(index, bool) or not isinstance(index, (int, list, range, torch.Tensor)):
            raise TypeError(
                f"{where}: invalid index (got {type(index).__name__}; "
                "expected an int, a slice, a 1-D tensor or list of ints, or a key). Fix the index."
            )
        positions = torch.as_tensor(index if not isinstance(index, range) else list(index))
        if positions.dim() > 1 or positions.is_floating_point() or positions.dtype == torch.bool:
            raise TypeError(
                f"{where}: invalid index (got a {positions.dtype} "
                f"tensor of shape {list(positions.shape)}; expected integer positions, 0-D or "
                "1-D). Fix the index."
            )
        positions = positions.long().cpu()
        if positions.numel():
            low, high = (int(x) for x in torch.aminmax(positions))
            if low < -n or high >= n:
                raise IndexError(
                    f"{where}: index out of range (got [{low}, {high}]; "
                    f"expected -{n} <= index < {n}). Index stored elements only."
                )
        positions = torch.where(positions < 0, positions + n, positions)
        return positions.reshape(-1), positions.dim() == 0


def select_first(data: Any, index: Any) -> Any:
    """``data[index]`` along the first dim of every leaf (TensorDict, tensor or pytree)."""
    if isinstance(data, (TensorDictBase, torch.Tensor)):
        return data[index]
    if isinstance(data, dict):
        return {k: select_first(v, index) for k, v in data.items()}
    return type(data)(select_first(v, index) for v in data)


def first_element(data: Any) -> Any:
    """Drops the leading dim of a one-element batch (TensorDict, tensor, list or pytree)."""
    if isinstance(data, (TensorDictBase, torch.Tensor)):
        return data[0]
    if isinstance(data, dict):
        return {k: first_element(v) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(first_element(v) for v in data)
    if isinstance(data, list) and data and all(isinstance(v, torch.Tensor) for v in data):
        return [first_element(v) for v in data]
    return data[0]


def pin(data: Any) -> Any:
    """Returns ``data`` with its tensors in pinned (page-locked) host memory."""
    if isinstance(data, (TensorDictBase, torch.Tensor)):
        return data.pin_memory()
    if isinstance(data, dict):
        return {k: pin(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(pin(v) for v in data)
    return data
