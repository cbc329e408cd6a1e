"""Writers decide which storage slots new data goes to."""

from __future__ import annotations

import abc
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.errors import CheckpointError

from ._refuse import refuse_unsupported
from ._storages import Batch, Storage

__all__ = ["RoundRobinWriter", "TensorDictMaxValueWriter", "TensorDictRoundRobinWriter", "Writer"]


class Writer(abc.ABC):
    """Places validated batches into a storage.

    :meth:`write` returns, for every row of the batch (its write dimension), the slot it went to,
    or ``-1`` when the writer dropped it.

    Examples:
        >>> from tdrl.data import LazyTensorStorage
        >>> storage, writer = LazyTensorStorage(4), RoundRobinWriter()
        >>> writer.write(storage, storage.prepare(torch.arange(6)))
        tensor([0, 1, 2, 3, 0, 1])
    """

    #: whether :meth:`write` may drop rows (return ``-1`` slots).
    drops: bool = False
    #: the number of elements written so far (see :attr:`~tdrl.data.ReplayBuffer.write_count`).
    _write_count: int = 0
    #: int attributes a shared buffer keeps equal in every process (see ``shared=True``).
    shared_ints: tuple[str, ...] = ("_write_count",)

    def __init__(self, compilable: bool = False) -> None:
        # TorchRL's torch.compile flag: tdrl's writers keep no state compile must skip, so both
        # values behave the same.
        self.compilable = bool(compilable)
        self._write_count = 0

    def count(self, elements: int, *, reset: bool = False) -> None:
        """Adds ``elements`` to the write count (``reset``: sets it to ``elements``)."""
        self._write_count = elements if reset else self._write_count + elements

    def _count_state(self) -> dict[str, Any]:
        return {"write_count": self._write_count}

    def _load_count(self, state: dict[str, Any], where: str) -> None:
        count = state.get("write_count", 0)  # checkpoints written before write_count: 0
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise CheckpointError(
                f"{where}: invalid write count (got {count!r}; expected an int >= 0). The "
                "checkpoint is corrupted; dump again."
            )
        self._write_count = count

    @abc.abstractmethod
    def write(self, storage: Storage, batch: Batch) -> torch.Tensor:
        """Writes ``batch`` and returns the slot of each row (``-1``: dropped)."""

    def check_storage(self, storage: Storage) -> None:  # noqa: B027 - optional hook
        """Raises if the writer cannot work with ``storage``."""

    def empty(self) -> None:  # noqa: B027 - optional hook
        """Resets the writer together with an emptied storage."""

    def share_problem(self) -> str | None:
        """Why the writer cannot be shared between processes (``None``: it can); see
        :meth:`~tdrl.data.Storage.share_problem`."""
        return None

    def config(self) -> dict[str, Any]:
        """The construction arguments a checkpoint must match."""
        return {"class": type(self).__name__}

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The writer state as tensors and JSON values."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`; raises ``CheckpointError`` if it is invalid."""

    def check_fits(self, length: int, slots: int, where: str) -> None:  # noqa: B027
        """Raises ``CheckpointError`` unless the loaded state can serve a storage that holds
        ``length`` elements in ``slots`` slots (called on a loaded copy before a checkpoint is
        accepted)."""


class RoundRobinWriter(Writer):
    """Writes to consecutive slots and wraps around, overwriting the oldest data (a ring buffer).

    Args:
        compilable: TorchRL's torch.compile flag; both values behave the same.
        track_generations: TorchRL's per-slot generation stamps; only ``False`` is accepted.

    Examples:
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(3), writer=RoundRobinWriter())
        >>> rb.extend(torch.arange(4))
        tensor([0, 1, 2, 0])
    """

    shared_ints = ("_cursor", "_write_count")

    def __init__(self, compilable: bool = False, *, track_generations: bool = False) -> None:
        super().__init__(compilable)
        refuse_unsupported(
            f"{type(self).__name__}.__init__", track_generations=(track_generations, False)
        )
        self._cursor = 0

    def write(self, storage: Storage, batch: Batch) -> torch.Tensor:
        """Writes ``batch`` at the cursor; returns the slots (``length`` of them, wrapped)."""
        start, slots = self._cursor, storage.slots
        storage.write_range(start, batch)
        self._cursor = (start + batch.length) % slots
        index = torch.arange(start, start + batch.length)
        return index if start + batch.length <= slots else index % slots

    def empty(self) -> None:
        self._cursor = 0

    def state_dict(self) -> dict[str, Any]:
        """``{"cursor": next slot to write, "write_count": elements written}``."""
        return {"cursor": self._cursor, **self._count_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        cursor = state_dict.get("cursor")
        if not isinstance(cursor, int) or cursor < 0:
            raise CheckpointError(
                f"RoundRobinWriter.load_state_dict: invalid cursor (got {cursor!r}; expected an "
                "int >= 0). The checkpoint is corrupted; dump again."
            )
        self._load_count(state_dict, "RoundRobinWriter.load_state_dict")
        self._cursor = cursor

    def check_fits(self, length: int, slots: int, where: str) -> None:
        if self._cursor >= slots:
            raise CheckpointError(
                f"{where}: the writer cursor is outside the storage (got cursor={self._cursor}; "
                f"expected 0 <= cursor < {slots}). The checkpoint is corrupted; dump again."
            )


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """TorchRL's round-robin writer for TensorDict buffers: the same ring as
    :class:`RoundRobinWriter`.

    TorchRL's version also stores an ``"index"`` entry with every element; in tdrl every
    sample of a :class:`~tdrl.data.TensorDictReplayBuffer` carries ``"index"`` already, so
    nothing extra is stored.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer, TensorDictRoundRobinWriter
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=TensorDictRoundRobinWriter())
        >>> rb.extend(TensorDict({"obs": torch.arange(3)}, [3]))
        tensor([0, 1, 0])
    """


_REDUCE = {
    "sum": lambda x: x.sum(1),
    "mean": lambda x: x.mean(1),
    "max": lambda x: x.amax(1),
    "min": lambda x: x.amin(1),
}
_REDUCTIONS = tuple(_REDUCE)


class TensorDictMaxValueWriter(Writer):
    """Keeps the elements with the largest ``rank_key`` value (the top ``max_size``).

    While the storage has room every element is written. Once it is full, a new element replaces
    the lowest-ranked stored one when it ranks higher; otherwise it is dropped (its slot is ``-1``,
    also for an element of the same batch that a later, higher-ranked one displaced).
    Ranks with extra dims are reduced with ``reduction``. Needs TensorDict data and an ``ndim=1``
    storage.

    Args:
        rank_key: the entry ranking the elements (default ``("next", "reward")``, as TorchRL).
        reduction: how to reduce extra dims of the rank: ``"sum"``, ``"mean"``, ``"max"``, ``"min"``.
        compilable: TorchRL's torch.compile flag; both values behave the same.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer, TensorDictMaxValueWriter
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r"))
        >>> rb.extend(TensorDict({"r": torch.tensor([1.0, 5.0, 3.0, 0.0])}, [4]))
        tensor([-1,  1,  0, -1])
        >>> sorted(rb.storage.get_leaf("r").tolist())
        [3.0, 5.0]
    """

    drops = True

    def __init__(
        self, rank_key: Any = None, reduction: str = "sum", *, compilable: bool = False
    ) -> None:
        super().__init__(compilable)
        if rank_key is None:
            rank_key = ("next", "reward")
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"TensorDictMaxValueWriter.__init__: unknown reduction (got {reduction!r}; expected one of "
                f"{_REDUCTIONS}). Pick one of them."
            )
        self.rank_key = rank_key
        self.reduction = reduction
        self._ranks: torch.Tensor | None = None

    def check_storage(self, storage: Storage) -> None:
        if storage.ndim != 1:
            raise ValueError(
                f"TensorDictMaxValueWriter.check_storage: unsupported storage (got ndim={storage.ndim}; expected "
                "ndim=1). Use a one-dimensional storage."
            )
        if not storage.bounded:
            raise ValueError(
                "TensorDictMaxValueWriter.check_storage: the storage has no size limit (got "
                "ListStorage(None); expected a max_size). Give the storage a max_size."
            )

    def _rank(self, data: Any, length: int) -> torch.Tensor:
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"TensorDictMaxValueWriter.write: the data is a {type(data).__name__} (expected a "
                "TensorDict). Use a TensorDictReplayBuffer."
            )
        if self.rank_key not in data.keys(True, True):
            raise KeyError(
                f"TensorDictMaxValueWriter.write: no rank entry {self.rank_key!r} (got keys "
                f"{list(data.keys(True, True))}). Add the entry to the data."
            )
        rank = data.get(self.rank_key).reshape(length, -1).to("cpu", torch.float64)
        return _REDUCE[self.reduction](rank)

    def write(self, storage: Storage, batch: Batch) -> torch.Tensor:
        """Writes the rows of ``batch`` that rank among the top ``storage.slots``."""
        rank = self._rank(batch.data, batch.length)
        cap = storage.slots
        if self._ranks is None or self._ranks.numel() != cap:
            self._ranks = torch.full((cap,), -torch.inf, dtype=torch.float64)
        slots = torch.full((batch.length,), -1, dtype=torch.long)
        free = min(cap - storage.filled, batch.length)
        if free > 0:
            slots[:free] = torch.arange(storage.filled, storage.filled + free)
            self._ranks[slots[:free]] = rank[:free]
        rest = torch.arange(free, batch.length)
        if rest.numel():
            # Top-``cap`` of (stored ranks, new ranks): the new winners take the slots of the
            # stored losers. Stable sort: on ties stored elements win.
            both = torch.cat([self._ranks, rank[rest]])
            order = torch.sort(both, descending=True, stable=True).indices
            kept, lost = order[:cap], order[cap:]
            evicted = lost[lost < cap]
            slots[rest[kept[kept >= cap] - cap]] = evicted
            # A row of this batch that filled a free slot and was evicted right away is dropped.
            slots[:free][torch.isin(slots[:free], evicted)] = -1
        written = (slots >= 0).nonzero().squeeze(1)
        if free > 0 and written.numel() == batch.length:
            storage.write_index(slots, batch)
        elif written.numel():
            storage.write_index(slots[written], batch.select(written))
        self._ranks[slots[written]] = rank[written]
        return slots

    def empty(self) -> None:
        self._ranks = None

    def share_problem(self) -> str | None:
        return (
            "got the ranks of the stored elements, kept by one process; expected a writer "
            "without per-process state, as TorchRL). Use RoundRobinWriter in a shared buffer."
        )

    def config(self) -> dict[str, Any]:
        key = list(self.rank_key) if isinstance(self.rank_key, tuple) else self.rank_key
        return {"class": type(self).__name__, "rank_key": key, "reduction": self.reduction}

    def state_dict(self) -> dict[str, Any]:
        """``{"ranks": rank of every slot (-inf if empty), "write_count": elements written}``."""
        ranks = self._ranks if self._ranks is not None else torch.empty(0, dtype=torch.float64)
        return {"ranks": ranks, **self._count_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = state_dict
        ranks = state.get("ranks")
        if not isinstance(ranks, torch.Tensor) or ranks.dim() != 1 or ranks.dtype != torch.float64:
            raise CheckpointError(
                "TensorDictMaxValueWriter.load_state_dict: invalid ranks (got "
                f"{type(ranks).__name__}; expected a 1-D float64 tensor). The checkpoint is "
                "corrupted; dump again."
            )
        self._load_count(state, "TensorDictMaxValueWriter.load_state_dict")
        self._ranks = ranks.clone() if ranks.numel() else None

    def check_fits(self, length: int, slots: int, where: str) -> None:
        ranks = self._ranks
        numel = 0 if ranks is None else ranks.numel()
        if (length and numel != slots) or (ranks is not None and bool(ranks.isnan().any())):
            raise CheckpointError(
                f"{where}: invalid writer ranks (got {numel} ranks, NaN: "
                f"{ranks is not None and bool(ranks.isnan().any())}; expected {slots} ranks "
                "without NaN). The checkpoint is corrupted; dump again."
            )
