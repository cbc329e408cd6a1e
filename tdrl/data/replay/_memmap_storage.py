"""The memory-mapped tensor storage: one raw file per data leaf, paged by the operating system."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
import uuid
import weakref
from multiprocessing.context import get_spawning_popen
from typing import Any

import torch

from ._pytree import Structure
from ._refuse import refuse_unsupported
from ._tensor_storages import TensorStorage, storage_device

__all__ = ["LazyMemmapStorage"]


_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def _remove_files(files: list[str]) -> None:
    for filename in files:
        with contextlib.suppress(OSError):
            os.remove(filename)


def _map(filename: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor over a shared mapping of ``filename``: writes reach the file and every process
    that maps it; hot-path ops run on a plain tensor (no subclass dispatch)."""
    return torch.from_file(filename, shared=True, size=math.prod(shape), dtype=dtype).view(shape)


class LazyMemmapStorage(TensorStorage):
    """A tensor storage backed by memory-mapped files, allocated on the first write.

    Each leaf is a raw file ``<scratch_dir>/<id>-<generation>_<n>_<key>.memmap`` (names unique to
    the storage, so storages may share a folder); the operating system pages data in and out, so
    buffers larger than RAM work. Unless ``auto_cleanup=False``, the files are removed when the
    storage is garbage-collected (with the temporary folder used when ``scratch_dir`` is
    ``None``); use :meth:`~tdrl.data.ReplayBuffer.dumps` to keep data in a loadable form.

    Args:
        max_size: the number of elements the storage holds.
        scratch_dir: the folder for the files (created); ``None`` for a temporary one.
        device: ``"cpu"`` (or ``"auto"``, which means the CPU here, as TorchRL); memory maps
            cannot live on another device.
        ndim: ``1`` for ``[N, ...]`` data, ``2`` for ``[env, time, ...]`` data.
        existsok: TorchRL's flag for files found on disk; tdrl's file names are unique to the
            storage, so no file pre-exists and both values behave the same.
        compilable: TorchRL's torch.compile flag; tdrl's storages behave the same either way.
        shared_init: TorchRL's multi-process initialisation; only ``False`` is accepted.
        auto_cleanup: ``False`` keeps the files after the storage is collected. ``None`` (the
            default) and ``True`` remove them, also in a user ``scratch_dir`` (TorchRL keeps
            those by default; tdrl's files are only readable by the storage that wrote them).

    Examples:
        >>> from tdrl.data import LazyMemmapStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyMemmapStorage(100), batch_size=2)
        >>> _ = rb.extend({"obs": torch.zeros(10, 3)})
        >>> rb.sample()["obs"].shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: str | os.PathLike[str] | None = None,
        device: torch.device | str = "cpu",
        ndim: int = 1,
        existsok: bool = False,
        compilable: bool = False,
        shared_init: bool = False,
        auto_cleanup: bool | None = None,
    ) -> None:
        name = f"{type(self).__name__}.__init__"
        refuse_unsupported(name, shared_init=(shared_init, False))
        target = storage_device(name, device)
        if target is not None and target.type != "cpu":
            raise ValueError(
                f"{name}: memory-mapped files live on the CPU (got device={device!r}; expected "
                "'cpu' or 'auto'). Move samples with buffer.append_transform(lambda x: "
                "x.to(device)), or use LazyTensorStorage(device=...)."
            )
        super().__init__(None, max_size, device="cpu", ndim=ndim, compilable=compilable)
        # tdrl names every file after this storage (a fresh id): no file exists before the
        # storage writes it, so TorchRL's existsok changes nothing.
        self.existsok = bool(existsok)
        self.auto_cleanup = auto_cleanup is not False
        self._scratch_arg = scratch_dir
        self._scratch: str | None = None
        self._id = uuid.uuid4().hex[:8]
        self._generation = 0
        # Files of the current layout and of the allocation in progress; the same list objects
        # are given to the finalizer, which removes what is left when the storage is collected.
        self._files: list[str] = []
        self._new_files: list[str] = []
        self._track_files()

    def _track_files(self) -> None:
        if self.auto_cleanup:
            weakref.finalize(self, _remove_files, self._files)
            weakref.finalize(self, _remove_files, self._new_files)

    def __getstate__(self) -> dict[str, Any]:
        # A copy (pickle, copy.deepcopy) gets files of its own: the original's files stay the
        # original's (its finalizer removes them; two storages writing one file would share
        # data silently). The buffers travel as plain tensors and are written into new files.
        state = super().__getstate__()
        for own in ("_files", "_new_files", "_id", "_generation"):
            state.pop(own)
        if self.process_shared and get_spawning_popen() is not None:
            # A shared buffer starting a process: the process maps the same files (it neither
            # owns nor removes them).
            files = iter(self._files)
            state["_bufs"] = [
                buf if not buf.numel() else (next(files), tuple(buf.shape), buf.dtype)
                for buf in self._bufs
            ]
            state["_mapped"] = True
        elif self._scratch_arg is None:
            state["_scratch"] = None  # a new temporary folder, removed with the copy
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._id, self._generation = uuid.uuid4().hex[:8], 0
        self._files, self._new_files = [], []
        if state.pop("_mapped", False):
            state["_bufs"] = [
                spec if isinstance(spec, torch.Tensor) else _map(*spec) for spec in state["_bufs"]
            ]
            self.__dict__.update(state)
            self._link_views()
            return
        self.__dict__.update(state)
        self._track_files()
        super().__setstate__(state)

    def share_memory_(self) -> None:
        """Nothing to move: memory-mapped files are shared between processes already."""

    def _arrival_needs_memory(self, bufs: list[torch.Tensor]) -> bool:
        return True  # the unpickled buffers live in memory: move them into files

    @property
    def scratch_dir(self) -> str | None:
        """The folder that holds the files (``None`` until the first write)."""
        return self._scratch

    def _folder(self) -> str:
        if self._scratch is None:
            if self._scratch_arg is None:
                self._scratch = tempfile.mkdtemp(prefix="tdrl-memmap-")
                if self.auto_cleanup:
                    weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
            else:
                os.makedirs(self._scratch_arg, exist_ok=True)
                self._scratch = os.fspath(self._scratch_arg)
        return self._scratch

    def _allocate(
        self,
        index: int,
        path: tuple[Any, ...],
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
    ) -> torch.Tensor:
        numel = math.prod(shape)
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        name = _FILE_CHARS.sub("_", ".".join(str(k) for k in path))[:80]
        filename = os.path.join(
            self._folder(), f"{self._id}-{self._generation}_{index}_{name}.memmap"
        )
        self._new_files.append(filename)
        with open(filename, "xb") as f:  # a sparse file: disk blocks are used when written
            f.truncate(numel * torch.empty((), dtype=dtype).element_size())
        return _map(filename, shape, dtype)

    def _set_layout(
        self,
        structure: Structure,
        bufs: list[torch.Tensor],
        env_shape: tuple[int, ...],
        device: torch.device,
    ) -> None:
        super()._set_layout(structure, bufs, env_shape, device)
        # Files of a previous layout are unlinked, not truncated: tensors still mapping them
        # (for instance a state_dict taken earlier) stay valid.
        _remove_files(self._files)
        self._files[:] = self._new_files
        self._new_files.clear()
        self._generation += 1
