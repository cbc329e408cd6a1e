"""What the offline datasets share: the base buffer class, the cache folder and its atomic writes.

A converted dataset lives in one folder (``<root>/<dataset_id>``) written by
:func:`~tdrl.data.replay._checkpoint.write_tree` (one raw ``.memmap`` file per tensor, JSON
metadata, no pickle) into a temporary sibling that is renamed into place when complete: a
conversion that fails or is killed leaves no folder a later open would take for a dataset. Next
to the tree's ``meta.json`` a ``dataset.json`` records what was converted (kind, options, source
fingerprint, the dataset's JSON metadata).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data.replay import Sampler, TensorDictReplayBuffer, TensorStorage, Writer
from tdrl.data.replay._checkpoint import atomic_write_dir, read_json, read_tree, write_tree
from tdrl.errors import CheckpointError

from ._writer import ImmutableDatasetWriter

__all__ = ["BaseDatasetExperienceReplay"]

INFO_FILE = "dataset.json"
INFO_FORMAT = "tdrl.dataset"
INFO_VERSION = 1


def default_root(kind: str) -> Path:
    """``~/.cache/tdrl/<kind>``: where converted datasets go when no ``root`` is given."""
    return Path.home() / ".cache" / "tdrl" / kind


def check_dataset_id(where: str, dataset_id: Any) -> str:
    """Refuses ids that are not relative, ``/``-separated names (they become folders)."""
    parts = dataset_id.split("/") if isinstance(dataset_id, str) else []
    if not parts or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise ValueError(
            f"{where}: invalid dataset_id (got {dataset_id!r}; expected a name such as "
            "'namespace/name-v0' without empty, '.' or '..' parts). Pass the dataset's id."
        )
    return dataset_id


def file_fingerprint(path: Path) -> dict[str, int]:
    """Size and modification time of ``path``: a changed source file means a stale cache."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def write_cache(
    path: Path,
    data: TensorDictBase,
    info: Mapping[str, Any],
    where: str,
    tensors: Mapping[str, Any] | None = None,
) -> None:
    """Writes ``data`` (and the tensor ``tensors`` metadata) to ``path`` atomically."""
    tree: dict[str, Any] = {"data": data.to_dict(), "extra": dict(tensors or {})}
    record = {
        **info,
        "format": INFO_FORMAT,
        "version": INFO_VERSION,
        "batch_size": list(data.batch_size),
    }
    atomic_write_dir(path, lambda tmp: write_tree(tmp, tree, {INFO_FILE: record}), where)


def read_info(path: Path, where: str) -> dict[str, Any]:
    """The ``dataset.json`` of a converted dataset (``CheckpointError`` naming it if invalid)."""
    info = read_json(path / INFO_FILE, where)
    if (
        not isinstance(info, dict)
        or info.get("format") != INFO_FORMAT
        or info.get("version") != INFO_VERSION
    ):
        raise CheckpointError(
            f"{where}: {path / INFO_FILE} is not a tdrl dataset record (got "
            f"{str(info)[:80]!r}; expected format {INFO_FORMAT!r} version {INFO_VERSION}). "
            "Delete the folder and open the dataset again to convert it anew."
        )
    return info


def read_cache(path: Path, where: str) -> tuple[TensorDict, dict[str, Any], dict[str, Any]]:
    """Maps a converted dataset: ``(data, tensor metadata, dataset.json)``; no pickle."""
    info = read_info(path, where)
    tree = read_tree(path, where)
    batch = info.get("batch_size")
    if not isinstance(tree.get("data"), dict) or not isinstance(batch, list):
        raise CheckpointError(
            f"{where}: {path} holds no data tree or no batch size. Delete the folder and open "
            "the dataset again to convert it anew."
        )
    try:
        data = TensorDict(tree["data"], batch_size=batch)
    except (RuntimeError, ValueError, TypeError) as err:
        raise CheckpointError(
            f"{where}: the tensors in {path} do not share the batch size {batch} ({err}). "
            "Delete the folder and open the dataset again to convert it anew."
        ) from err
    return data, tree.get("extra") or {}, info


def remove_dataset(path: Path) -> None:
    """Removes a converted dataset folder (nothing if absent)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)


class BaseDatasetExperienceReplay(TensorDictReplayBuffer):
    """Parent class of the offline datasets: a read-only buffer over converted data on disk.

    Subclasses convert their source once into :attr:`data_path` and wrap the memory-mapped
    result in a :class:`~tdrl.data.TensorStorage` (TorchRL's class of the same name).
    The default writer is :class:`ImmutableDatasetWriter`: ``extend`` raises.

    Attributes:
        metadata: what the dataset says about itself (a dict).
        env_id: the gymnasium id of the env the data was recorded on (``None`` if unknown).

    Examples:
        >>> issubclass(BaseDatasetExperienceReplay, TensorDictReplayBuffer)
        True
    """

    metadata: dict[str, Any]
    env_id: str | None = None
    _root: Path

    def _init_buffer(
        self,
        data: TensorDictBase,
        batch_size: int,
        *,
        sampler: Sampler | None,
        writer: Writer | None,
        collate_fn: Callable[[Any], Any] | None,
        pin_memory: bool,
        prefetch: int | None,
        transform: Callable[[Any], Any] | None,
    ) -> None:
        super().__init__(
            storage=TensorStorage(data),
            sampler=sampler,
            writer=ImmutableDatasetWriter() if writer is None else writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            batch_size=batch_size,
        )

    @property
    def root(self) -> Path:
        """The folder that holds the converted datasets."""
        return self._root

    @root.setter
    def root(self, value: str | os.PathLike[str]) -> None:
        self._root = Path(value)

    @property
    def data_path_root(self) -> Path:
        """The folder of the converted dataset (without trajectory split)."""
        raise NotImplementedError

    @property
    def data_path(self) -> Path:
        """The folder the buffer reads (the split one with ``split_trajs=True``)."""
        return self.data_path_root

    @property
    def dataset_root(self) -> Path:
        """tdrl's name for :attr:`data_path`: the folder whose files the buffer maps."""
        return self.data_path

    def _is_downloaded(self) -> bool:
        return self.data_path_root.is_dir()

    def delete(self) -> None:
        """Deletes the converted data from disk (the buffer must not be sampled afterwards).

        Examples:
            >>> callable(BaseDatasetExperienceReplay.delete)
            True
        """
        remove_dataset(self.data_path)


def as_tensor(value: Any) -> torch.Tensor:
    """A torch tensor over a numpy array (or number) that keeps its dtype."""
    return torch.as_tensor(value)
