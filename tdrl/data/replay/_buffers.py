"""The replay buffer: a storage, a sampler and a writer behind one small API."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.context import get_spawning_popen
from typing import Any

import torch

from ._buffer_checkpoints import BufferCheckpoints
from ._buffer_transforms import BufferIndexing, TransformChain, pin
from ._h5 import H5StorageCheckpointer
from ._prefetch import Prefetcher
from ._prioritized import PrioritizedSampler
from ._refuse import refuse_unsupported
from ._samplers import RandomSampler, Sampler
from ._shared import ProcessShared, check_shareable
from ._storages import Batch, ListStorage, Storage
from ._writers import RoundRobinWriter, Writer

__all__ = ["ReplayBuffer", "make_component"]


def make_component(owner: str, arg: str, value: Any, kind: type) -> Any:
    """A storage, sampler or writer given as an instance, or (as TorchRL) as a class or any
    callable that builds one when called without arguments (``functools.partial(...)``).

    Examples:
        >>> import functools
        >>> from tdrl.data import LazyTensorStorage
        >>> make_component("here", "storage", functools.partial(LazyTensorStorage, 8), Storage).max_size
        8
    """
    if value is None or isinstance(value, kind):
        return value
    what = kind.__name__
    if not callable(value):
        raise TypeError(
            f"{owner}: invalid {arg} (got {type(value).__name__}; expected a {what}, or a class "
            f"or callable that returns one). Pass a tdrl {what}."
        )
    label = getattr(value, "__name__", None) or type(value).__name__
    try:
        built = value()
    except TypeError as err:
        raise TypeError(
            f"{owner}: the {arg} factory {label} cannot be called without arguments (got "
            f"{err}; expected a callable that returns a {what} when called with none). Pass an "
            f"instance, or functools.partial({label}, <its arguments>)."
        ) from err
    if not isinstance(built, kind):
        raise TypeError(
            f"{owner}: the {arg} factory {label} returned a {type(built).__name__} (expected a "
            f"{what}). Pass a callable that returns a tdrl {what}."
        )
    return built


def _positive_or_none(owner: str, name: str, value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(
            f"{owner}: invalid {name} (got {value!r}; expected None or an int >= 1). Fix the argument."
        )
    return value


class ReplayBuffer(BufferIndexing, BufferCheckpoints):
    """Stores data and samples batches of it.

    A buffer combines a :class:`~tdrl.data.Storage` (where data lives), a
    :class:`~tdrl.data.Sampler` (which elements a batch holds) and a :class:`~tdrl.data.Writer`
    (where new data goes). It holds tensors, TensorDicts or pytrees (nested dicts/lists/tuples) of
    tensors; :meth:`sample` returns the same kind of data, stacked. With ``return_info=True`` it
    also returns an info dict: ``"index"`` (flat indices of the sampled elements; for ``ndim > 1``
    storages TorchRL's coordinates, one tensor per storage dim ``(time, env)``) and the
    sampler's extras (``"priority_weight"`` for :class:`~tdrl.data.PrioritizedSampler`).

    Thread safety: ``extend``, ``sample`` and ``update_priority`` take a lock, so a prefetch thread
    or a collector thread may use the buffer concurrently.

    Args:
        storage: defaults to ``ListStorage(1000)``. As in TorchRL, the storage, sampler and
            writer may also be given as a class or a callable that builds one when called
            without arguments (``functools.partial(LazyTensorStorage, 1000)``).
        sampler: defaults to :class:`~tdrl.data.RandomSampler`.
        writer: defaults to :class:`~tdrl.data.RoundRobinWriter`.
        transform: a callable applied to every sampled batch (for TensorDict buffers, a tdrl
            ``Transform`` or any ``TensorDict -> TensorDict`` callable).
        batch_size: the default batch size of :meth:`sample` (needed for iteration and prefetch).
        prefetch: the number of batches a background thread samples ahead (``None``: no thread).
            Prefetched batches may predate later ``extend``/``update_priority`` calls.
        generator: the random generator of the sampler; a seeded one makes sampling
            reproducible (its state is part of checkpoints).
        checkpointer: an :class:`~tdrl.data.H5StorageCheckpointer` makes :meth:`dumps` write
            the storage as one HDF5 file (set on the storage, as TorchRL).

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
        storage: Storage | Callable[[], Storage] | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        sample_unit: Any = None,
        writer: Writer | Callable[[], Writer] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        transform_factory: Callable[[], Callable[[Any], Any]] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        checkpointer: H5StorageCheckpointer | None = None,
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
            consume_after_n_samples=(consume_after_n_samples, None),
            service_backend=(service_backend, "direct"),
            service_backend_options=(service_backend_options, None),
            transport=(transport, ("auto", "direct")),
            transport_options=(transport_options, None),
        )
        made_storage = make_component(name, "storage", storage, Storage)
        made_sampler = make_component(name, "sampler", sampler, Sampler)
        made_writer = make_component(name, "writer", writer, Writer)
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
        self._storage = made_storage if made_storage is not None else ListStorage(1000)
        self._sampler = made_sampler if made_sampler is not None else RandomSampler()
        self._writer = made_writer if made_writer is not None else RoundRobinWriter()
        if checkpointer is not None:  # as TorchRL: the buffer's checkpointer goes to its storage
            self._storage.checkpointer = checkpointer
        self._sampler.check_storage(self._storage)
        self._writer.check_storage(self._storage)
        self._announce_prefilled()
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
        self._lock: contextlib.AbstractContextManager[Any] = threading.RLock()
        self._shared: ProcessShared | None = None
        self._prefetcher: Prefetcher | None = None
        self._last_ran_out = False
        if shared:
            self.share(True)

    def _announce_prefilled(self) -> None:
        """Tells the sampler about data the storage held before this buffer existed (a
        ``TensorStorage(data)``), in storage order, as if it had been written then: slice
        samplers learn the write order, prioritized ones give each element the default priority
        (TorchRL's samplers read such data too)."""
        filled = len(self._storage)
        if filled:  # flat positions: slice samplers split them per env stream themselves
            self._sampler.add(self._storage, torch.arange(filled))

    # -- sharing between processes --------------------------------------------------------------

    @property
    def shared(self) -> bool:
        """Whether the buffer is shared between processes (see :meth:`share`)."""
        return self._shared is not None

    def share(self, shared: bool = True) -> ReplayBuffer:
        """Shares the buffer with the processes it is given to, or stops sharing it (TorchRL's
        ``share``; ``ReplayBuffer(..., shared=True)`` calls it). Returns the buffer.

        A shared buffer passed to a process (``mp.Process(target=f, args=(rb,))``, with the
        ``fork``, ``forkserver`` or ``spawn`` start method) is the same buffer there: data
        written by any process, the length, the write cursor and ``write_count`` are seen by all.
        ``extend``, ``add``, ``sample``, ``update_priority``, indexing, ``empty`` and checkpoints
        take a multiprocessing lock (waits end with ``TimeoutError`` after 120 s). The storage
        data moves into shared memory (a :class:`~tdrl.data.LazyMemmapStorage` shares its
        files); read the length through the buffer (``len(rb)``), not through ``rb.storage``.

        As in TorchRL, a lazy storage must hold data before the buffer reaches another process,
        and a :class:`~tdrl.data.ListStorage`, a :class:`~tdrl.data.PrioritizedSampler` (or
        :class:`~tdrl.data.PrioritizedSliceSampler`) and a
        :class:`~tdrl.data.TensorDictMaxValueWriter` cannot cross processes: starting the
        process (``spawn``/``forkserver``) or a forked process's first call raises
        ``RuntimeError`` naming the part. A :class:`~tdrl.data.SamplerWithoutReplacement`
        keeps its epoch in each process. Pickling a shared buffer outside process start
        (``pickle.dumps``, ``copy.deepcopy``) makes an independent shared copy.

        Args:
            shared: ``False`` makes the buffer a one-process buffer again (processes started
                before keep the shared state).

        Raises:
            ValueError: for a prefetching buffer (as TorchRL).

        Examples:
            >>> import multiprocessing as mp
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), shared=True)
            >>> _ = rb.extend(torch.arange(2))  # allocate before the processes start
            >>> p = mp.get_context("fork").Process(target=rb.extend, args=(torch.arange(3),))
            >>> p.start(); p.join(30)
            >>> len(rb), rb[:].tolist(), rb.write_count
            (5, [0, 1, 0, 1, 2], 5)
        """
        if shared and self._prefetch:
            raise ValueError(
                f"{type(self).__name__}.share: a prefetching buffer cannot be shared (got "
                f"prefetch={self._prefetch}; expected no prefetch, as TorchRL). Pass prefetch=None "
                "or shared=False."
            )
        with self._lock:
            if bool(shared) == self.shared:
                return self
            self._storage.process_shared = bool(shared)
            if shared:
                self._shared = ProcessShared((self._storage, self._sampler, self._writer))
                self._lock = self._shared
            else:
                self._shared, self._lock = None, threading.RLock()
        return self

    # -- pickling -------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The buffer without its lock and prefetch thread (a copy starts its own on demand).

        A pickled (or ``copy.deepcopy``-ed) buffer is an independent copy: its storage, sampler,
        writer and generator continue from the state they had, and sample what the original
        samples from the same state.
        """
        with self._lock:
            state = dict(self.__dict__)
        state.pop("_lock")
        state["_prefetcher"] = None  # prefetched batches are dropped: the copy samples anew
        if self._shared is not None and get_spawning_popen() is None:
            state["_shared"] = "copy"  # an independent copy, shared with processes it starts
        elif self._shared is not None:  # a process being started gets the same buffer
            check_shareable(
                f"{type(self).__name__} (sent to a new process)",
                (self._storage, self._sampler, self._writer),
            )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
        if self._shared == "copy":
            self._shared = None
            self._storage.process_shared = False
            self.share(True)
        elif self._shared is not None:
            self._lock = self._shared

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

    def _read(self, index: torch.Tensor) -> Any:
        """The elements at ``index``, through ``collate_fn``: as TorchRL, it gets a list of
        elements from a :class:`~tdrl.data.ListStorage` and the stacked batch otherwise."""
        if self._collate_fn is None:
            return self._storage.get(index)
        if isinstance(self._storage, ListStorage):
            return self._collate_fn(self._storage.get_items(index))
        return self._collate_fn(self._storage.get(index))

    def __len__(self) -> int:
        if self._shared is not None:
            with self._lock:  # loads the length the other processes wrote
                return len(self._storage)
        return len(self._storage)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={type(self._storage).__name__}(max_size="
            f"{self._storage.max_size}), sampler={type(self._sampler).__name__}, writer="
            f"{type(self._writer).__name__}, len={len(self)}, batch_size={self._batch_size})"
        )

    # -- writing --------------------------------------------------------------------------------

    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Adds a batch of elements and returns their indices.

        Args:
            data: a batch (leading dim = elements; ``[env, time]`` for ``ndim=2`` storages).
            update_priority: TorchRL's switch for priorities read from TensorDict data; only
                TensorDict buffers have it (``None`` here, as TorchRL).

        Returns:
            The flat index of every element, shaped like the data's leading dims (``-1`` for
            elements a max-value writer dropped). For ``ndim > 1`` storages, TorchRL's
            ``[steps * envs, ndim]`` coordinates ``(time, env)`` of the steps written.

        Raises:
            ValueError: if keys, shapes or dtypes do not match the stored data (nothing is
                written then).
            NotImplementedError: if ``update_priority`` is given.
        """
        if update_priority is not None:
            raise NotImplementedError(
                f"{type(self).__name__}.extend: update_priority is not supported here (got "
                f"{update_priority!r}; expected None). Only TensorDict buffers read priorities "
                "from the data; call update_priority(index, priority) instead."
            )
        with self._lock:
            return self._public_write_index(self._write(data, single=False))

    def add(self, data: Any) -> Any:
        """Adds one element (one step per env for ``ndim=2``) and returns its index.

        Returns:
            The index as an ``int`` (as TorchRL); for ``ndim > 1`` storages, the ``[envs, ndim]``
            coordinates ``(time, env)`` of the step of every env.

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
            >>> rb.add(torch.ones(3))
            0
        """
        with self._lock:
            index = self._write(data, single=True).squeeze(-1)
            if self._storage.ndim > 1:
                return self._public_write_index(index.unsqueeze(-1))
        return int(index) if index.dim() == 0 else index

    @property
    def write_count(self) -> int:
        """The number of elements written so far by ``add`` and ``extend`` (as TorchRL).

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(2))
            >>> _ = rb.extend(torch.arange(3)); _ = rb.add(torch.tensor(5))
            >>> rb.write_count, len(rb)
            (4, 2)
        """
        if self._shared is not None:
            with self._lock:  # loads the count the other processes wrote
                return self._writer._write_count
        return self._writer._write_count

    def _prepare_data(self, data: Any) -> Any:
        return data

    def _write(self, data: Any, single: bool, update_priority: bool = True) -> torch.Tensor:
        if len(self._transforms):
            data = self._transforms.inv(data)
        data = self._prepare_data(data)
        batch = self._storage.prepare(data, single=single)
        slots = self._writer.write(self._storage, batch)
        index = self._storage.flat_index(slots)
        keep = self._written(slots)
        self._sampler.add(self._storage, index if keep is None else index[..., keep])
        self._writer.count(index.numel())
        if update_priority:
            self._after_write(batch, index, keep)
        return index

    def _written(self, slots: torch.Tensor) -> Any:
        """Which rows of the write survive: ``None`` for all, else an index or a slice."""
        if slots.numel() > self._storage.slots:  # the first rows were overwritten at once
            return slice(slots.numel() - self._storage.slots, None)
        if self._writer.drops and slots.numel() and int(slots.min()) < 0:
            return (slots >= 0).nonzero().squeeze(1)
        return None

    def _public_write_index(self, index: torch.Tensor) -> torch.Tensor:
        """What ``extend``/``add`` return: flat indices shaped like the data for ``ndim=1``;
        TorchRL's ``[steps * envs, ndim]`` coordinates (``(time, env)``, time-major) else."""
        storage = self._storage
        if storage.ndim == 1:
            return index
        return storage.unravel_index(index.movedim(-1, 0).reshape(-1))  # type: ignore[attr-defined]

    def _public_sample_index(self, index: torch.Tensor) -> Any:
        """The ``"index"`` of a sample: flat for ``ndim=1``; TorchRL's coordinates (one tensor
        per storage dim, ``(time, env)``) else."""
        if self._storage.ndim == 1:
            return index
        return tuple(self._storage.unravel_index(index).unbind(-1))  # type: ignore[attr-defined]

    def _flat_index(self, index: Any, where: str) -> torch.Tensor:
        """Flat indices from what ``sample``/``extend`` gave: flat ones, or for ``ndim > 1``
        coordinates (a tuple of tensors or a ``[..., ndim]`` tensor), as TorchRL takes them."""
        if isinstance(index, tuple):
            index = torch.stack([torch.as_tensor(i) for i in index], -1)
        index = torch.as_tensor(index)
        storage = self._storage
        if storage.ndim > 1 and index.dim() >= 2:
            if index.shape[-1] != storage.ndim or index.is_floating_point():
                raise ValueError(
                    f"{where}: invalid coordinates (got a {index.dtype} tensor of shape "
                    f"{list(index.shape)}; expected integer [..., ndim={storage.ndim}] "
                    'coordinates). Pass the "index" of a sample.'
                )
            index = storage.ravel_index(index.long())  # type: ignore[attr-defined]
        return index

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
        info = {"index": self._public_sample_index(index), **extra}
        # As TorchRL: the transforms see the index (TorchRL stores it with every element) and it
        # is set again after them, so a transform cannot drop or change it.
        data = self._attach(data, info)
        if len(self._transforms):
            data = self._attach(self._transforms(data), info)
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

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
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
        index = self._flat_index(index, f"{name}.update_priority")
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

    def empty(self, empty_write_count: bool = True) -> None:
        """Removes every element (stops the prefetch thread; it restarts on the next sample).

        Args:
            empty_write_count: also reset :attr:`write_count` to 0 (as TorchRL).

        Examples:
            >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(4))
            >>> _ = rb.extend(torch.arange(3))
            >>> rb.empty(empty_write_count=False)
            >>> len(rb), rb.write_count
            (0, 3)
        """
        self._stop_prefetch()
        with self._lock:
            count = self._writer._write_count
            self._storage.empty()
            self._writer.empty()
            self._writer.count(0 if empty_write_count else count, reset=True)
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
