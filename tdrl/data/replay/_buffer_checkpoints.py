"""Replay buffer checkpoints: ``state_dict``/``load_state_dict`` and pickle-free ``dumps``/``loads``."""

from __future__ import annotations

import contextlib
import copy
import os
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
from ._h5 import write_h5_storage
from ._safe_io import checkpoint_errors
from ._samplers import Sampler
from ._storages import Storage
from ._writers import Writer

__all__ = ["BufferCheckpoints"]


class BufferCheckpoints:
    """The checkpoint methods of :class:`~tdrl.data.ReplayBuffer` (a mixin over its parts).

    Examples:
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
        >>> isinstance(ReplayBuffer(storage=LazyTensorStorage(4)), BufferCheckpoints)
        True
    """

    _storage: Storage
    _sampler: Sampler
    _writer: Writer
    _generator: torch.Generator | None
    _lock: contextlib.AbstractContextManager[Any]  # a thread lock, or ProcessShared
    _last_ran_out: bool

    def __len__(self) -> int:
        return len(self._storage)

    def _stop_prefetch(self) -> None:
        raise NotImplementedError

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

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` into this buffer (built with matching components).

        Everything is validated before the buffer changes.

        Raises:
            CheckpointError: if the state is invalid or was saved from different components.
        """
        self._load(state_dict, f"{type(self).__name__}.load_state_dict")

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
            state = self.state_dict()
            checkpointer = self._storage.checkpointer
            if checkpointer is None:
                write_buffer_dir(path, state, where)
                return
            storage = state["storage"]

            def h5(tmp: Path) -> None:
                write_h5_storage(
                    tmp / "storage" / checkpointer.checkpoint_file, storage, checkpointer
                )

            write_buffer_dir(path, {**state, "storage": checkpointer.marker()}, where, after=h5)

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Restores a checkpoint written by :meth:`dumps` (no pickle: JSON and raw files only).

        Unknown extra files in the directory are ignored. A checkpoint whose storage was
        written by an :class:`~tdrl.data.H5StorageCheckpointer` loads too (it needs h5py).

        Raises:
            CheckpointError: if the directory is missing, partial or corrupted, or was dumped from
                a buffer with different components.
        """
        where = f"{type(self).__name__}.loads"
        with checkpoint_errors(path, where):
            state = read_buffer_dir(path, where, self._storage.max_size)
            self._load(state, where, Path(path))
