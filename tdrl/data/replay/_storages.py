"""Storage interface and the list storage.

A storage holds ``max_size`` elements. Writers place data in *slots* along the storage's write
dimension (time); samplers and users address elements with *flat indices*. For ``ndim=1`` storages
slots and flat indices coincide. Tensor storages with ``ndim > 1`` (see
:class:`~tdrl.data.TensorStorage`) hold ``[env, time]`` data as TorchRL does (``[time, env]``) and
use time-major flat indices; buffers report TorchRL's ``(time, env)`` coordinates to the user.
"""

from __future__ import annotations

import abc
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensorclass

from tdrl.errors import CheckpointError

from ._h5 import H5StorageCheckpointer
from ._pytree import Structure, align, flatten, unflatten

__all__ = ["UNBOUNDED", "Batch", "ListStorage", "Storage"]

#: the ``max_size`` of an unbounded :class:`ListStorage` (``ListStorage(None)``, as TorchRL).
UNBOUNDED = sys.maxsize


@dataclass
class Batch:
    """Data validated by :meth:`Storage.prepare`, ready to be written.

    Attributes:
        data: the user's data (with a leading dim added for single items).
        length: the number of write slots it fills (its size along the write dimension).
        leaves: for tensor storages, one tensor per leaf with the write dimension first.
        items: for list storages, one element per slot.
        layout: for list storages, the element structure and leaf signature (``None``: objects).

    Examples:
        >>> batch = ListStorage(4).prepare(torch.arange(3))
        >>> batch.length, batch.select(torch.tensor([2])).items
        (3, [(tensor(2),)])
    """

    data: Any
    length: int
    leaves: list[torch.Tensor] = field(default_factory=list)
    items: list[Any] = field(default_factory=list)
    layout: Any = None

    def select(self, rows: torch.Tensor) -> Batch:
        """Keeps the given rows (positions along the write dimension)."""
        if self.items:
            items = [self.items[i] for i in rows.tolist()]
            return Batch(self.data, rows.numel(), items=items, layout=self.layout)
        leaves = [leaf.index_select(0, rows.to(leaf.device)) for leaf in self.leaves]
        return Batch(self.data, rows.numel(), leaves=leaves)


class Storage(abc.ABC):
    """Where a replay buffer keeps its data.

    Subclasses implement :meth:`prepare` (validate without writing), :meth:`write_range`,
    :meth:`write_index` and :meth:`get`. ``len(storage)`` counts the valid elements; they are the
    flat indices ``0 .. len(storage) - 1``.

    Examples:
        >>> storage = ListStorage(10)
        >>> batch = storage.prepare(torch.arange(3))
        >>> storage.write_range(0, batch)
        >>> len(storage), storage.get(torch.tensor([2, 0]))
        (3, tensor([2, 0]))
    """

    #: whether :meth:`state_dict` holds only tensors and JSON values (``dumps`` support).
    checkpointable: bool = True
    #: int attributes a shared buffer keeps equal in every process (see ``shared=True``).
    shared_ints: tuple[str, ...] = ("_filled",)
    #: set by a shared buffer: sent to a process it starts, the storage keeps its memory.
    process_shared: bool = False

    def __init__(self, max_size: int, checkpointer: Any = None, compilable: bool = False) -> None:
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 1:
            raise ValueError(
                f"{type(self).__name__}.__init__: invalid max_size (got {max_size!r}; expected an int "
                ">= 1). Pass the number of elements the storage holds."
            )
        self.max_size = max_size
        self._checkpointer: H5StorageCheckpointer | None = None
        self.checkpointer = checkpointer
        self.ndim = 1
        self._filled = 0
        # TorchRL's flag for torch.compile-friendly storages: tdrl's storages hold no
        # Python-side state that compile must skip, so both values behave the same.
        self.compilable = bool(compilable)

    @property
    def checkpointer(self) -> H5StorageCheckpointer | None:
        """How ``dumps`` writes the storage: ``None`` for tdrl's raw files, or an
        :class:`~tdrl.data.H5StorageCheckpointer` for one HDF5 file (TorchRL's attribute)."""
        return self._checkpointer

    @checkpointer.setter
    def checkpointer(self, value: H5StorageCheckpointer | None) -> None:
        name = f"{type(self).__name__}.checkpointer"
        if value is not None and not isinstance(value, H5StorageCheckpointer):
            raise TypeError(
                f"{name}: unsupported checkpointer (got {type(value).__name__}; expected None or "
                "an H5StorageCheckpointer). Leave it None for tdrl's pickle-free format."
            )
        if value is not None and not self.checkpointable:
            raise ValueError(
                f"{name}: {type(self).__name__} cannot be dumped (got {value!r}; expected a "
                "tensor storage). Use LazyTensorStorage or LazyMemmapStorage."
            )
        self._checkpointer = value

    @property
    def bounded(self) -> bool:
        """Whether the storage has a size limit (only ``ListStorage(None)`` has none)."""
        return self.max_size != UNBOUNDED

    @property
    def slots(self) -> int:
        """The number of slots along the write dimension (``max_size`` for ``ndim=1``)."""
        return self.max_size

    @property
    def filled(self) -> int:
        """The number of slots written at least once."""
        return self._filled

    @property
    def env_numel(self) -> int:
        """Elements per slot (the product of the env dims; 1 for ``ndim=1``)."""
        return 1

    @property
    def capacity(self) -> int:
        """The largest number of elements the storage can hold."""
        return self.slots * self.env_numel

    def __len__(self) -> int:
        return self._filled * self.env_numel

    def flat_index(self, slots: torch.Tensor) -> torch.Tensor:
        """Flat indices of the elements in ``slots`` (shape ``[*env, len(slots)]``)."""
        return slots

    @abc.abstractmethod
    def prepare(self, data: Any, single: bool = False) -> Batch:
        """Validates ``data`` (a batch, or one item if ``single``) without writing it."""

    @abc.abstractmethod
    def write_range(self, start: int, batch: Batch) -> None:
        """Writes ``batch`` into consecutive slots from ``start``, wrapping around."""

    @abc.abstractmethod
    def write_index(self, slots: torch.Tensor, batch: Batch) -> None:
        """Writes row ``i`` of ``batch`` into slot ``slots[i]`` (slots are unique)."""

    @abc.abstractmethod
    def get(self, index: torch.Tensor) -> Any:
        """Returns the elements at the flat indices ``index`` (1-D), stacked."""

    @abc.abstractmethod
    def get_leaf(self, key: Any) -> torch.Tensor:
        """Returns the valid elements of one leaf as a ``[len(self), ...]`` tensor."""

    def set(self, cursor: Any, data: Any, *, set_cursor: bool = True) -> None:
        """Writes ``data`` at write slots ``cursor`` (TorchRL's ``Storage.set``).

        ``cursor`` is an int (``data`` is one element), or a slice, list or 1-D tensor of slots
        (``data`` is a batch with one row per slot). Slots may be past the filled part (the
        storage grows to the largest one written). ``set_cursor`` is TorchRL's bookkeeping flag
        for its writers; tdrl's writers keep their own cursor, so both values write the same.

        Raises:
            IndexError: if a slot is outside ``[0, slots)``.
            ValueError: if the number of rows differs from the number of slots.

        Examples:
            >>> s = ListStorage(4)
            >>> s.set(2, torch.tensor(7))
            >>> s.set([0, 1], torch.tensor([5, 6]))
            >>> len(s), s.get(torch.tensor([0, 1, 2]))
            (3, tensor([5, 6, 7]))
        """
        name = f"{type(self).__name__}.set"
        single = isinstance(cursor, int) and not isinstance(cursor, bool)
        if isinstance(cursor, slice):
            slots = torch.arange(*cursor.indices(self.slots))
        else:
            slots = torch.as_tensor(cursor).reshape(-1).long().cpu()
        if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= self.slots):
            raise IndexError(
                f"{name}: cursor out of range (got {cursor!r}; expected slots in "
                f"[0, {self.slots})). Write inside the storage."
            )
        batch = self.prepare(data, single=single)
        if batch.length != slots.numel() or slots.unique().numel() != slots.numel():
            raise ValueError(
                f"{name}: the data does not match the cursor (got {batch.length} rows for "
                f"{slots.numel()} slots; expected one row per distinct slot). Pass as many rows "
                "as slots."
            )
        self.write_index(slots, batch)

    def empty(self) -> None:
        """Forgets every element (allocated memory is kept for reuse)."""
        self._filled = 0

    def share_problem(self) -> str | None:
        """Why the storage cannot be shared between processes now (``None``: it can): the
        tail of an error message, ``"got <what>; expected <rule>). <How to fix>."``."""
        return None

    def share_memory_(self) -> None:  # noqa: B027 - optional hook
        """Moves the data into memory that other processes can map (a shared buffer calls it)."""

    def config(self) -> dict[str, Any]:
        """The construction arguments a checkpoint must match."""
        return {"class": type(self).__name__, "max_size": self.max_size, "ndim": self.ndim}

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The content of the storage (tensors and JSON values for checkpointable storages)."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`; raises ``CheckpointError`` if it is invalid."""

    def check_state(self, state: dict[str, Any], where: str) -> tuple[int, int]:
        """Validates a :meth:`state_dict` without loading it; returns ``(len, slots)`` it gives.

        Raises:
            CheckpointError: if the state is invalid for this storage.
        """
        filled = state.get("filled")
        if not isinstance(filled, int) or isinstance(filled, bool) or not 0 <= filled <= self.slots:
            raise CheckpointError(
                f"{where}: invalid storage fill level (got filled={filled!r}; expected an int in "
                f"[0, {self.slots}]). The checkpoint is corrupted; dump again."
            )
        return filled * self.env_numel, self.slots

    def _update_filled(self, start: int, length: int) -> None:
        self._filled = max(self._filled, min(start + length, self.slots))


def _is_tensor_data(data: Any) -> bool:
    if isinstance(data, (TensorDictBase, torch.Tensor, dict)) or is_tensorclass(data):
        return True
    if isinstance(data, tuple):  # a pytree of tensors, or (as TorchRL) a sequence of objects
        try:
            flatten(data)
        except TypeError:
            return False
        return True
    return False


class ListStorage(Storage):
    """A storage that keeps every element as its own Python object.

    Tensor data (a TensorDict, a tensorclass, a tensor or a pytree of tensors) is split along its
    first dim and each element keeps its own tensors (views of the data given); sampling stacks
    them back. Anything else is stored from an iterable (a list, a tuple, ``range(n)``, a set, an
    array, ...), one element per item, as TorchRL, and is sampled as a list.
    Flexible but slower than tensor storages, and not checkpointable with ``dumps`` (use
    :class:`~tdrl.data.LazyTensorStorage` for that).

    Args:
        max_size: the number of elements the storage holds; ``None`` (TorchRL's default) for no
            limit (the buffer never overwrites; prioritized and slice samplers need a limit).
        compilable: TorchRL's torch.compile flag; tdrl's storages behave the same either way.
        device: where tensor data is moved on write (``None``: it stays where it is). Objects
            that are not tensor data are stored as given.

    Examples:
        >>> from tdrl.data import ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(100), batch_size=4)
        >>> _ = rb.extend(["a", "b", "c"])
        >>> len(rb), len(rb.sample())
        (3, 4)
    """

    checkpointable = False

    def __init__(
        self,
        max_size: int | None = None,
        *,
        compilable: bool = False,
        device: torch.device | str | int | None = None,
    ) -> None:
        super().__init__(UNBOUNDED if max_size is None else max_size, compilable=compilable)
        self.device = torch.device(device) if device is not None else None
        self._items: list[Any] = []
        # Tensor data: the structure and (shape, dtype) of each element's leaves; None for objects.
        self._structure: Structure | None = None
        self._signature: tuple[Any, ...] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The elements of tensor data are views of the batches they came from, and pickle sends
        # a view's whole buffer: each element is sent as a compact copy instead.
        state = dict(self.__dict__)
        if self._structure is not None:
            state["_items"] = [
                item if item is None else tuple(leaf.clone() for leaf in item)
                for item in self._items
            ]
        return state

    def _fail(self, what: str, got: Any, expected: Any, fix: str) -> ValueError:
        return ValueError(f"ListStorage.extend: {what} (got {got}; expected {expected}). {fix}.")

    def share_problem(self) -> str | None:
        return (
            "got a ListStorage of one process's Python objects; expected a tensor storage, as "
            "TorchRL). Use LazyTensorStorage or LazyMemmapStorage."
        )

    def _rows(self, data: Any, single: bool) -> tuple[Structure, list[tuple[torch.Tensor, ...]]]:
        structure, leaves = flatten(data, lead=0 if single else 1)
        if self.device is not None:
            leaves = [leaf.to(self.device) for leaf in leaves]
        if single:
            return structure, [tuple(leaves)]
        if isinstance(data, TensorDictBase) and not data.batch_dims:
            raise self._fail(
                "the data has too few batch dims",
                [],
                "at least 1",
                "Extend with a batch, or use add() for a single element",
            )
        lead = {leaf.shape[0] if leaf.dim() else None for leaf in leaves}
        if len(lead) > 1 or None in lead:
            raise self._fail(
                "the leaves disagree on the batch size",
                sorted(lead, key=str),
                "one shared first dim",
                "Fix the data, or use add() for a single element",
            )
        return structure, list(zip(*(leaf.unbind(0) for leaf in leaves)))

    def prepare(self, data: Any, single: bool = False) -> Batch:
        """Splits ``data`` into elements and checks they match the stored ones.

        Examples:
            >>> ListStorage(5).prepare(torch.zeros(3, 2)).length
            3
        """
        if not _is_tensor_data(data):
            if not single and (isinstance(data, (str, bytes)) or not hasattr(data, "__iter__")):
                raise TypeError(
                    f"ListStorage.extend: cannot split a {type(data).__name__} into elements "
                    "(got it; expected tensor data or an iterable of elements: a list, tuple, "
                    "range, set, array, ...). Use add() for a single element."
                )
            items = [data] if single else list(data)
            if self._structure is not None and len(self):
                raise self._fail(
                    "objects cannot join tensor data",
                    type(data).__name__,
                    "tensor data",
                    "Empty the buffer first",
                )
            return Batch(data, len(items), items=items)
        structure, rows = self._rows(data, single)
        if len(self) and self._structure is not None and structure != self._structure and rows:
            if align(structure, list(rows[0]), self._structure) is not None:
                # The same keys in another order: reorder every element.
                order = [structure.paths.index(p) for p in self._structure.paths]
                structure, rows = self._structure, [tuple(r[i] for i in order) for r in rows]
        signature = tuple((tuple(x.shape), x.dtype) for x in rows[0]) if rows else None
        if len(self) and (structure, signature) != (self._structure, self._signature):
            raise self._fail(
                "the data does not match the stored elements",
                f"keys {list(structure.paths)} with shapes/dtypes {signature} and element "
                f"batch {dict(structure.batch)}",
                f"keys {list(self._structure.paths) if self._structure else None} with "
                f"{self._signature} and element batch "
                f"{dict(self._structure.batch) if self._structure else None}",
                "Extend with the same keys, shapes and dtypes, or empty() the buffer first",
            )
        return Batch(data, len(rows), items=rows, layout=(structure, signature))

    def _remember(self, batch: Batch) -> None:
        if not len(self):
            self._structure, self._signature = batch.layout or (None, None)

    def write_range(self, start: int, batch: Batch) -> None:
        """Stores the elements of ``batch`` from slot ``start`` on."""
        self._remember(batch)
        items = batch.items[-self.max_size :]
        start = (start + batch.length - len(items)) % self.max_size
        for offset, item in enumerate(items):
            self._set(start + offset, item)

    def write_index(self, slots: torch.Tensor, batch: Batch) -> None:
        """Stores element ``i`` of ``batch`` into ``slots[i]``."""
        self._remember(batch)
        for slot, item in zip(slots.tolist(), batch.items):
            self._set(slot, item)

    def _set(self, slot: int, item: Any) -> None:
        slot %= self.max_size
        if slot >= len(self._items):
            self._items.extend([None] * (slot + 1 - len(self._items)))
        self._items[slot] = item
        self._update_filled(slot, 1)

    def get(self, index: torch.Tensor) -> Any:
        """Returns the elements at ``index``: tensor data stacked, objects as a list.

        Examples:
            >>> s = ListStorage(5)
            >>> s.write_range(0, s.prepare(torch.arange(4)))
            >>> s.get(torch.tensor([3, 1]))
            tensor([3, 1])
        """
        items = [self._items[i] for i in index.tolist()]
        if self._structure is None:
            return items
        columns = [torch.stack(column) for column in zip(*items)]
        return unflatten(self._structure, columns, (len(items),))

    def get_items(self, index: torch.Tensor) -> list[Any]:
        """Returns the elements at ``index`` as a list, unstacked (what a ``collate_fn`` gets).

        Examples:
            >>> s = ListStorage(5)
            >>> s.write_range(0, s.prepare(torch.arange(4)))
            >>> s.get_items(torch.tensor([3, 1]))
            [tensor(3), tensor(1)]
        """
        items = [self._items[i] for i in index.tolist()]
        if self._structure is None:
            return items
        return [unflatten(self._structure, list(item), ()) for item in items]

    def get_leaf(self, key: Any) -> torch.Tensor:
        """Stacks leaf ``key`` (a TensorDict key or a pytree key path) of every valid element."""
        path = key if isinstance(key, tuple) else (key,)
        paths = self._structure.paths if self._structure is not None else ()
        if path not in paths:
            raise KeyError(
                f"ListStorage.get_leaf: no entry {key!r} (got {key!r}; expected one of "
                f"{list(paths)}). Check the key."
            )
        i = paths.index(path)
        return torch.stack([item[i] for item in self._items[: len(self)]])

    def empty(self) -> None:
        super().empty()
        self._items = []
        self._structure = self._signature = None

    @property
    def _storage(self) -> list[Any]:
        """TorchRL's ``storage._storage``: the list of stored elements (a new list; tensor data
        comes as one element each, in the user's format)."""
        return self.get_items(torch.arange(len(self)))

    def state_dict(self) -> dict[str, Any]:
        """The stored elements (in memory only: a list storage cannot be dumped)."""
        return {
            "filled": self._filled,
            "items": list(self._items[: self._filled]),
            "structure": self._structure,
            "signature": self._signature,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self._items = list(state_dict["items"])
        self._filled = int(state_dict["filled"])
        self._structure, self._signature = state_dict["structure"], state_dict["signature"]
