"""The replay buffer: a storage, a sampler and a writer behind one small API."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from tdrl.errors import CheckpointError

from ._buffer_state import (
    FORMAT,
    METADATA,
    VERSION,
    check_header,
    check_length,
    checked_generator_state,
    read_buffer_dir,
    write_buffer_dir,
)
from ._buffer_transforms import TransformChain, first_element, pin
from ._prefetch import Prefetcher
from ._prioritized import PrioritizedSampler
from ._safe_io import checkpoint_errors
from ._samplers import RandomSampler, Sampler
from ._storages import Batch, ListStorage, Storage
from ._writers import RoundRobinWriter, Writer

__all__ = ["ReplayBuffer"]


def refuse_unsupported(owner: str, **args: tuple[Any, Any]) -> None:
    """Raises for TorchRL arguments tdrl cannot honour, given with a non-default value.

    Each keyword maps to ``(value, allowed)``; ``allowed`` is the default or a tuple of accepted
    values.
    """
    for arg, (value, allowed) in args.items():
        accepted = allowed if isinstance(allowed, tuple) else (allowed,)
        if not any(value is a or (a is not None and value == a) for a in accepted):
            raise ValueError(
                f"{owner}: {arg} is not supported by tdrl (got {value!r}; expected "
                f"{' or '.join(repr(a) for a in accepted)}). {_WHY.get(arg, 'Leave it at its default')}."
            )


_WHY = {
    "sample_unit": "Use a SliceSampler for windows of steps",
    "dim_extend": "Lay data out [env, time] with LazyTensorStorage(ndim=2) instead",
    "checkpointer": "Buffers write pickle-free checkpoints with dumps()/loads()",
    "consume_after_n_samples": "Call empty() after the samples you need",
    "shared": "Buffers are shared by threads in one process, not across processes",
    "service_backend": "Buffers run in the calling process",
    "service_backend_options": "Buffers run in the calling process",
    "transport": "Buffers run in the calling process",
    "transport_options": "Buffers run in the calling process",
}


def _positive_or_none(owner: str, name: str, value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(
            f"{owner}: invalid {name} (got {value!r}; expected None or an int >= 1). Fix the argument."
        )
    return value


class ReplayBuffer:
    """Stores data and samples batches of it.

    A buffer combines a :class:`~tdrl.data.Storage` (where data lives), a
    :class:`~tdrl.data.Sampler` (which elements a batch holds) and a :class:`~tdrl.data.Writer`
    (where new data goes). It holds tensors, TensorDicts or pytrees (nested dicts/lists/tuples) of
    tensors; :meth:`sample` returns the same kind of data, stacked. With ``return_info=True`` it
    also returns an info dict: ``"index"`` (flat indices of the sampled elements) and the sampler's
    extras (``"priority_weight"`` for :class:`~tdrl.data.PrioritizedSampler`).

    Thread safety: ``extend``, ``sample`` and ``update_priority`` take a lock, so a prefetch thread
    or a collector thread may use the buffer concurrently.

    Args:
        storage: defaults to ``ListStorage(1000)``.
        sampler: defaults to :class:`~tdrl.data.RandomSampler`.
        writer: defaults to :class:`~tdrl.data.RoundRobinWriter`.
        transform: a callable applied to every sampled batch (for TensorDict buffers, a tdrl
            ``Transform`` or any ``TensorDict -> TensorDict`` callable).
        batch_size: the default batch size of :meth:`sample` (needed for iteration and prefetch).
        prefetch: the number of batches a background thread samples ahead (``None``: no thread).
            Prefetched batches may predate later ``extend``/``update_priority`` calls.
        generator: the random generator of the sampler; a seeded one makes sampling
            reproducible (its state is part of checkpoints).

    Examples:
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, generator=torch.Generator().manual_seed(0))
        >>> rb.extend({"obs": torch.randn(10, 3), "action": torch.zeros(10, dtype=torch.long)})
        tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        >>> batch = rb.sample()
        >>> batch["obs"].shape, len(rb)
        (torch.Size([4, 3]), 10)
    """

    def __init__(
        self,
        *,
        storage: Storage | None = None,
        sampler: Sampler | None = None,
        sample_unit: Any = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        transform_factory: Callable[[], Callable[[Any], Any]] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        checkpointer: Any = None,
        generator: torch.Generator | None = None,
        consume_after_n_samples: int | None = None,
        shared: bool = False,
        compilable: bool | None = None,
        delayed_init: bool | None = None,
        service_backend: str = "direct",
        service_backend_options: dict[str, Any] | None = None,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        name = f"{type(self).__name__}.__init__"
        refuse_unsupported(
            name,
            sample_unit=(sample_unit, None),
            dim_extend=(dim_extend, None),
            checkpointer=(checkpointer, None),
            consume_after_n_samples=(consume_after_n_samples, None),
            shared=(shared, False),
            service_backend=(service_backend, "direct"),
            service_backend_options=(service_backend_options, None),
            transport=(transport, ("auto", "direct")),
            transport_options=(transport_options, None),
        )
        for arg, value, kind in (
            ("storage", storage, Storage),
            ("sampler", sampler, Sampler),
            ("writer", writer, Writer),
        ):
            if value is not None and not isinstance(value, kind):
                raise TypeError(
                    f"{name}: invalid {arg} (got {type(value).__name__}; expected a {kind.__name__}). Pass a tdrl {kind.__name__}."
                )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"{name}: invalid generator (got {type(generator).__name__}; expected a torch.Generator). Pass torch.Generator().manual_seed(seed)."
            )
        if transform is not None and transform_factory is not None:
            raise ValueError(
                f"{name}: transform and transform_factory are exclusive (got both). Pass one."
            )
        for arg, fn in (("collate_fn", collate_fn), ("transform_factory", transform_factory)):
            if fn is not None and not callable(fn):
                raise TypeError(
                    f"{name}: invalid {arg} (got {type(fn).__name__}; expected a callable). Pass a function."
                )
        if pin_memory and not torch.cuda.is_available():
            raise RuntimeError(
                f"{name}: pin_memory=True needs a CUDA device (got none available; expected "
                "torch.cuda.is_available()). Pass pin_memory=False on CPU-only machines."
            )
        self._storage = storage if storage is not None else ListStorage(1000)
        self._sampler = sampler if sampler is not None else RandomSampler()
        self._writer = writer if writer is not None else RoundRobinWriter()
        self._sampler.check_storage(self._storage)
        self._writer.check_storage(self._storage)
        self._transforms = TransformChain()
        if transform_factory is not None:
            transform = transform_factory()
        if transform is not None:
            self._transforms.insert(0, transform, invert=False)
        self._collate_fn = collate_fn
        self._pin_memory = bool(pin_memory)
        # Accepted for TorchRL code: tdrl's buffers have no separate torch.compile mode (the
        # sampling path holds no Python-side state that compile would need to skip).
        self.compilable = bool(compilable)
        self._batch_size = _positive_or_none(name, "batch_size", batch_size)
        self._prefetch = _positive_or_none(name, "prefetch", prefetch)
        if self._prefetch and self._batch_size is None:
            raise ValueError(
                f"{name}: prefetch needs a batch size (got prefetch={prefetch}, batch_size=None; "
                "expected an int batch_size). Pass batch_size=... with prefetch."
            )
        self._generator = generator
        self._lock = threading.RLock()
        self._prefetcher: Prefetcher | None = None
        self._last_ran_out = False

    # -- accessors ------------------------------------------------------------------------------

    @property
    def storage(self) -> Storage:
        """The storage."""
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler."""
        return self._sampler

    @property
    def writer(self) -> Writer:
        """The writer."""
        return self._writer

    @property
    def batch_size(self) -> int | None:
        """The default batch size of :meth:`sample`."""
        return self._batch_size

    @property
    def generator(self) -> torch.Generator | None:
        """The random generator used for sampling (``None``: the global one)."""
        return self._generator

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
        ``rb[:]["obs"]``). Nothing is sampled and no ``"index"`` entry is added.

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
        positions, single = self._positions(index)
        if not positions.numel():
            raise IndexError(
                f"{type(self).__name__}.__getitem__: empty selection (got {index!r} with "
                f"len={len(self)}). Select at least one element."
            )
        with self._lock:
            data = first_element(self._storage.get(positions)) if single else self._read(positions)
        return self._transforms(data) if len(self._transforms) else data

    def _positions(self, index: Any) -> tuple[torch.Tensor, bool]:
        n = len(self)
        if isinstance(index, slice):
            return torch.arange(n)[index], False
        if isinstance(index, bool) or not isinstance(index, (int, list, range, torch.Tensor)):
            raise TypeError(
                f"{type(self).__name__}.__getitem__: invalid index (got {type(index).__name__}; "
                "expected an int, a slice, a 1-D tensor or list of ints, or a key). Fix the index."
            )
        positions = torch.as_tensor(index if not isinstance(index, range) else list(index))
        if positions.dim() > 1 or positions.is_floating_point() or positions.dtype == torch.bool:
            raise TypeError(
                f"{type(self).__name__}.__getitem__: invalid index (got a {positions.dtype} "
                f"tensor of shape {list(positions.shape)}; expected integer positions, 0-D or "
                "1-D). Fix the index."
            )
        positions = positions.long().cpu()
        if positions.numel():
            low, high = (int(x) for x in torch.aminmax(positions))
            if low < -n or high >= n:
                raise IndexError(
                    f"{type(self).__name__}.__getitem__: index out of range (got [{low}, {high}]; "
                    f"expected -{n} <= index < {n}). Index stored elements only."
                )
        positions = torch.where(positions < 0, positions + n, positions)
        return positions.reshape(-1), positions.dim() == 0

    def _read(self, index: torch.Tensor) -> Any:
        """The elements at ``index``, through ``collate_fn``: as TorchRL, it gets a list of
        elements from a :class:`~tdrl.data.ListStorage` and the stacked batch otherwise."""
        if self._collate_fn is None:
            return self._storage.get(index)
        if isinstance(self._storage, ListStorage):
            return self._collate_fn(self._storage.get_items(index))
        return self._collate_fn(self._storage.get(index))

    def __len__(self) -> int:
        return len(self._storage)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={type(self._storage).__name__}(max_size="
            f"{self._storage.max_size}), sampler={type(self._sampler).__name__}, writer="
            f"{type(self._writer).__name__}, len={len(self)}, batch_size={self._batch_size})"
        )

    # -- writing --------------------------------------------------------------------------------

    def extend(self, data: Any) -> torch.Tensor:
        """Adds a batch of elements and returns their flat indices.

        Args:
            data: a batch (leading dim = elements; ``[env, time]`` for ``ndim=2`` storages).

        Returns:
            The flat index of every element, shaped like the data's leading dims (``-1`` for
            elements a max-value writer dropped).

        Raises:
            ValueError: if keys, shapes or dtypes do not match the stored data (nothing is
                written then).
        """
        with self._lock:
            return self._write(data, single=False)

    def add(self, data: Any) -> torch.Tensor:
        """Adds one element (one step per env for ``ndim=2``) and returns its flat index.

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> rb.add(torch.ones(3))
            tensor(0)
        """
        with self._lock:
            return self._write(data, single=True).squeeze(-1)

    def _prepare_data(self, data: Any) -> Any:
        return data

    def _write(self, data: Any, single: bool) -> torch.Tensor:
        if len(self._transforms):
            data = self._transforms.inv(data)
        data = self._prepare_data(data)
        batch = self._storage.prepare(data, single=single)
        slots = self._writer.write(self._storage, batch)
        index = self._storage.flat_index(slots)
        keep = self._written(slots)
        self._sampler.add(self._storage, index if keep is None else index[..., keep])
        self._after_write(batch, index, keep)
        return index

    def _written(self, slots: torch.Tensor) -> Any:
        """Which rows of the write survive: ``None`` for all, else an index or a slice."""
        if slots.numel() > self._storage.slots:  # the first rows were overwritten at once
            return slice(slots.numel() - self._storage.slots, None)
        if self._writer.drops and slots.numel() and int(slots.min()) < 0:
            return (slots >= 0).nonzero().squeeze(1)
        return None

    def _after_write(self, batch: Batch, index: torch.Tensor, keep: Any) -> None:
        """Hook run after a write (TensorDict buffers set priorities from the data)."""

    # -- sampling -------------------------------------------------------------------------------

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        name = type(self).__name__
        if batch_size is None:
            if self._batch_size is None:
                raise ValueError(
                    f"{name}.sample: no batch size (got batch_size=None and no default; expected an int). Pass batch_size to sample() or to the constructor."
                )
            return self._batch_size
        _positive_or_none(f"{name}.sample", "batch_size", batch_size)
        if self._prefetch and batch_size != self._batch_size:
            raise ValueError(
                f"{name}.sample: a prefetching buffer samples its own batch size (got {batch_size}; expected {self._batch_size}). Call sample() without batch_size."
            )
        return batch_size

    def _sample_now(self, batch_size: int) -> tuple[Any, dict[str, torch.Tensor], bool]:
        with self._lock:
            index, extra = self._sampler.sample(self._storage, batch_size, self._generator)
            data = self._read(index)
            ran_out = self._sampler.ran_out
        info = {"index": index, **extra}
        data = self._attach(data, info)
        if len(self._transforms):
            data = self._transforms(data)
        if self._pin_memory:
            data = pin(data)
        return data, info, ran_out

    def _attach(self, data: Any, info: dict[str, torch.Tensor]) -> Any:
        """Hook that puts the info into the sample (TensorDict buffers)."""
        return data

    def _fetch(self, batch_size: int) -> tuple[Any, dict[str, torch.Tensor], bool]:
        if not self._prefetch:
            return self._sample_now(batch_size)
        if self._prefetcher is None:
            # The thread holds the buffer weakly, so that an unreferenced buffer is collected
            # (its __del__ stops the thread) instead of being kept alive by its own thread.
            ref = weakref.ref(self)

            def produce() -> tuple[Any, dict[str, torch.Tensor], bool]:
                buffer = ref()
                if buffer is None:
                    raise RuntimeError("ReplayBuffer.sample: the buffer was garbage-collected.")
                return buffer._sample_now(batch_size)

            self._prefetcher = Prefetcher(produce, self._prefetch)
        try:
            return self._prefetcher.get()
        except BaseException:
            self._stop_prefetch()
            raise

    def sample(self, batch_size: int | None = None, *, return_info: bool = False) -> Any:
        """Samples a batch.

        Args:
            batch_size: the number of elements; defaults to the constructor's ``batch_size``.
            return_info: also return the info dict (``"index"``, ``"priority_weight"``, ...).

        Returns:
            The batch (after ``transform``), or ``(batch, info)`` with ``return_info``.

        Raises:
            RuntimeError: if the buffer is empty.
        """
        data, info, ran_out = self._fetch(self._resolve_batch_size(batch_size))
        self._last_ran_out = ran_out
        return (data, info) if return_info else data

    def __iter__(self) -> Iterator[Any]:
        """Yields ``sample()`` until the sampler ends an epoch (never, for random samplers).

        Examples:
            >>> import itertools
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
            >>> _ = rb.extend(torch.arange(5))
            >>> len(list(itertools.islice(rb, 3)))
            3
        """
        if self._batch_size is None:
            raise RuntimeError(
                f"{type(self).__name__}.__iter__: no batch size (got None; expected an int). Build the buffer with batch_size=... to iterate."
            )
        while True:
            yield self.sample()
            if self._last_ran_out:
                return

    # -- priorities -----------------------------------------------------------------------------

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets the priority of the elements at flat ``index`` (prioritized samplers only).

        Raises:
            TypeError: if the sampler has no priorities.
            IndexError: if an index is not a stored element.
            ValueError: if shapes differ, or priorities are NaN, infinite or negative.
        """
        name = type(self).__name__
        if not isinstance(self._sampler, PrioritizedSampler):
            raise TypeError(
                f"{name}.update_priority: the sampler has no priorities (got {type(self._sampler).__name__}; expected a PrioritizedSampler). Build the buffer with a PrioritizedSampler."
            )
        index = torch.as_tensor(index)
        with self._lock:
            n = len(self._storage)
            if index.numel():
                low, high = (int(x) for x in torch.aminmax(index))
                if low < 0 or high >= n:
                    raise IndexError(
                        f"{name}.update_priority: index out of range (got [{low}, {high}]; "
                        f"expected 0 <= index < len={n}). Pass indices returned by sample() or "
                        "extend()."
                    )
            self._sampler.update_priority(index, priority)

    # -- lifecycle ------------------------------------------------------------------------------

    def _stop_prefetch(self) -> None:
        prefetcher, self._prefetcher = self._prefetcher, None
        if prefetcher is not None:
            prefetcher.close()

    def empty(self) -> None:
        """Removes every element (stops the prefetch thread; it restarts on the next sample)."""
        self._stop_prefetch()
        with self._lock:
            self._storage.empty()
            self._writer.empty()
            self._sampler.empty()
            self._last_ran_out = False

    def close(self) -> None:
        """Stops the prefetch thread; idempotent (also run on garbage collection)."""
        self._stop_prefetch()

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- checkpoints ----------------------------------------------------------------------------

    def _components(self) -> dict[str, Any]:
        return {
            "buffer": {"class": type(self).__name__},
            "storage": self._storage.config(),
            "sampler": self._sampler.config(),
            "writer": self._writer.config(),
        }

    def state_dict(self) -> dict[str, Any]:
        """The whole buffer state: tensors and JSON values, storage tensors as views (no copy).

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend(torch.arange(3))
            >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> rb2.load_state_dict(rb.state_dict())
            >>> len(rb2)
            3
        """
        with self._lock:
            generator = {} if self._generator is None else {"state": self._generator.get_state()}
            return {
                "format": FORMAT,
                "version": VERSION,
                "components": self._components(),
                "len": len(self),
                "storage": self._storage.state_dict(),
                "sampler": self._sampler.state_dict(),
                "writer": self._writer.state_dict(),
                "generator": generator,
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` into this buffer (built with matching components).

        Everything is validated before the buffer changes.

        Raises:
            CheckpointError: if the state is invalid or was saved from different components.
        """
        self._load(state, f"{type(self).__name__}.load_state_dict")

    def _load(self, state: dict[str, Any], where: str, source: Path | None = None) -> None:
        def naming(part: str) -> contextlib.AbstractContextManager[None]:
            # Errors about a section of a checkpoint folder name the file or folder it came from.
            return (
                contextlib.nullcontext()
                if source is None
                else checkpoint_errors(source / part, where)
            )

        with naming(METADATA):
            check_header(state, self._components(), where)
        with naming("generator"):
            generator_state = checked_generator_state(state, where)
        with naming("storage"):
            length, slots = self._storage.check_state(state["storage"], where)
        with naming(METADATA):
            check_length(state, length, where)
        # Dry runs on copies validate the sampler and writer states before anything changes.
        for part in ("sampler", "writer"):
            with naming(part):
                probe = copy.deepcopy(getattr(self, f"_{part}"))
                probe.load_state_dict(state[part])
                probe.check_fits(length, slots, where)
        self._stop_prefetch()
        with self._lock:
            self._storage.load_state_dict(state["storage"])
            self._sampler.load_state_dict(state["sampler"])
            self._writer.load_state_dict(state["writer"])
            if generator_state is not None:
                if self._generator is None:
                    self._generator = torch.Generator()
                self._generator.set_state(generator_state)
            self._last_ran_out = False

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Writes a pickle-free checkpoint directory, atomically.

        Layout: ``buffer_metadata.json`` (components and format), ``storage/`` (one raw
        ``.memmap`` file per tensor leaf, nested keys as folders, ``meta.json`` with dtypes and
        shapes), ``sampler/``, ``writer/`` and ``generator/``. The directory is first written to a
        temporary sibling, fsynced, then swapped into place: an interrupted dump leaves the
        previous checkpoint intact. Dumping again to the same path replaces it.

        Raises:
            CheckpointError: for a :class:`~tdrl.data.ListStorage` (it holds arbitrary objects),
                or if ``path`` is a non-empty directory that is not a checkpoint.

        Examples:
            >>> import tempfile
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> _ = rb.extend(torch.arange(4))
            >>> path = tempfile.mkdtemp()
            >>> rb.dumps(path)
            >>> rb2 = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> rb2.loads(path)
            >>> len(rb2)
            4
        """
        where = f"{type(self).__name__}.dumps"
        if not self._storage.checkpointable:
            raise CheckpointError(
                f"{where}: {type(self._storage).__name__} cannot be dumped (got a storage of arbitrary Python objects; expected a tensor storage). Use LazyTensorStorage or LazyMemmapStorage."
            )
        with self._lock:  # the state holds views of the storage: no write may interleave
            write_buffer_dir(path, self.state_dict(), where)

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Restores a checkpoint written by :meth:`dumps` (no pickle: JSON and raw files only).

        Unknown extra files in the directory are ignored.

        Raises:
            CheckpointError: if the directory is missing, partial or corrupted, or was dumped from
                a buffer with different components.
        """
        where = f"{type(self).__name__}.loads"
        with checkpoint_errors(path, where):
            self._load(read_buffer_dir(path, where), where, Path(path))
