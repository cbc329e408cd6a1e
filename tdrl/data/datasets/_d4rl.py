"""``D4RLExperienceReplay``: a D4RL HDF5 file as a read-only, memory-mapped replay buffer."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase

from tdrl.data.replay import Sampler, Writer

from ._common import (
    BaseDatasetExperienceReplay,
    check_dataset_id,
    default_root,
    file_fingerprint,
    read_cache,
    read_info,
    write_cache,
)
from ._split import split_by_done

__all__ = ["D4RLExperienceReplay"]

_WHERE = "D4RLExperienceReplay.__init__"
_SUFFIXES = (".hdf5", ".h5")


class D4RLExperienceReplay(BaseDatasetExperienceReplay):
    """A D4RL dataset file as a read-only replay buffer (TorchRL's class and layout).

    The HDF5 file (D4RL's layout: ``observations``, ``actions``, ``rewards``, ``terminals``,
    optional ``timeouts``, ``next_observations``, ``infos/*``, ``metadata/*``) is read with
    ``h5py`` (``pip install 'tdrl[offline]'``) and converted once into memory-mapped files;
    later opens map them (the conversion is redone when the file or the options changed).
    ``dataset_id`` is a path to the file, or an id whose file is ``<root>/<dataset_id>.hdf5``
    and whose converted data is ``<root>/<dataset_id>``. tdrl does not download: TorchRL's
    download by URL (or through the ``d4rl`` package) is replaced by a ``FileNotFoundError``
    that names the id, the places looked and how to place the file. A truncated or corrupted
    file raises :class:`~tdrl.errors.CheckpointError` naming it; nothing is half-written.

    Layout (what TorchRL's ``direct_download`` conversion gives, ``N - 1`` transitions of an
    ``N``-row file): ``observation``, ``action``, ``("next", "observation")``
    (``next_observations`` or the following row, zeroed where ``("next", "done")``),
    ``("next", "reward")`` ``[N-1, 1]``, ``("next", "terminated"/"truncated"/"done")`` bool
    ``[N-1, 1]`` (``done = terminals | timeouts`` with ``use_truncated_as_done``, else
    ``terminals``), the root ``reward``/``done``/``terminated``/``truncated`` of the previous
    step, ``info``/``("next", "info")`` from ``infos/*``, and tdrl's ``episode`` (int64
    trajectory counter, for :class:`~tdrl.data.SliceSampler`). ``metadata/*`` goes to
    :attr:`metadata`.

    Args:
        dataset_id: a path to a D4RL ``.hdf5`` file, or an id looked up as
            ``<root>/<dataset_id>.hdf5``.
        batch_size: the default sample size.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as
            :class:`~tdrl.data.ReplayBuffer` (default writer: :class:`ImmutableDatasetWriter`).
        split_trajs: store zero-padded ``[num_traj, max_len]`` rows (with ``"mask"``,
            ``"traj_ids"``; the last ``("next", "done")`` of each row set, as TorchRL).
        from_env: TorchRL's ``env.get_dataset()`` path through the ``d4rl`` package; only
            ``False`` is supported (tdrl reads the file itself).
        use_truncated_as_done: ``done = terminated | truncated`` (else ``terminated``).
        direct_download: ``None`` or ``True`` (tdrl reads files directly); ``False`` (the
            ``d4rl`` package) is refused.
        terminate_on_end: ``None`` or ``True`` (the direct reading keeps the last step of every
            trajectory); ``False`` raises, as TorchRL's ``direct_download``.
        download: ``"force"`` converts again; otherwise a missing file raises.
        root: where files are looked up and converted data goes (default
            ``~/.cache/tdrl/d4rl``).
        **env_kwargs: refused (TorchRL passes them to ``d4rl``).

    Attributes:
        metadata: the file's ``metadata/*`` entries as a dict (``{}`` without them).
        env_id: ``metadata["env_id"]`` (or ``"env_name"``) when the file records it.

    Examples:
        >>> import tempfile, h5py, numpy as np
        >>> tmp = tempfile.mkdtemp()
        >>> with h5py.File(tmp + "/toy.hdf5", "w") as f:
        ...     f["observations"] = np.arange(5, dtype=np.float32)[:, None]
        ...     f["actions"] = np.zeros((5, 1), np.float32)
        ...     f["rewards"] = np.ones(5, np.float32)
        ...     f["terminals"] = np.array([0, 1, 0, 0, 0], bool)
        ...     f["timeouts"] = np.zeros(5, bool)
        >>> data = D4RLExperienceReplay(tmp + "/toy.hdf5", batch_size=2, root=tmp + "/cache")
        >>> td = data[:]
        >>> td["next", "observation"].squeeze(-1).tolist(), td["episode"].tolist()
        ([1.0, 0.0, 3.0, 4.0], [0, 0, 1, 1])
    """

    def __init__(
        self,
        dataset_id: str | os.PathLike[str],
        batch_size: int,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        split_trajs: bool = False,
        from_env: bool = False,
        use_truncated_as_done: bool = True,
        direct_download: bool | None = None,
        terminate_on_end: bool | None = None,
        download: bool | str = True,
        root: str | Path | None = None,
        **env_kwargs: Any,
    ) -> None:
        _refuse(from_env, direct_download, terminate_on_end, env_kwargs)
        self.root = default_root("d4rl") if root is None else root
        self.use_truncated_as_done = bool(use_truncated_as_done)
        self.split_trajs = bool(split_trajs)
        self.from_env = False
        self._source, self.dataset_id = self._resolve(dataset_id)
        data = self._open(download)
        self._init_buffer(
            data,
            batch_size,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
        )

    def _resolve(self, dataset_id: Any) -> tuple[Path, str]:
        """(source file, cache name): a path keeps its name plus a hash of where it lives."""
        text = os.fspath(dataset_id) if isinstance(dataset_id, str | os.PathLike) else None
        if text is not None and (text.endswith(_SUFFIXES) or os.path.isfile(text)):
            path = Path(text).expanduser().resolve()
            digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
            return path, f"files/{path.stem}-{digest}"
        name = check_dataset_id(_WHERE, dataset_id)
        return self.root / f"{name}.hdf5", name

    @property
    def data_path_root(self) -> Path:
        """``<root>/<dataset_id>``: the converted dataset."""
        return self.root / self.dataset_id

    def _options(self) -> dict[str, Any]:
        return {
            "use_truncated_as_done": self.use_truncated_as_done,
            "split_trajs": self.split_trajs,
        }

    def _open(self, download: Any) -> TensorDictBase:
        if download not in (True, False, "force"):
            raise ValueError(
                f"{_WHERE}: invalid download (got {download!r}; expected True, False or "
                "'force'). Pass one of them."
            )
        path = self.data_path_root
        if download == "force" or not path.is_dir() or self._stale(path):
            self._convert(path)
        data, extra, _ = read_cache(path, _WHERE)
        self.metadata = dict(extra.get("metadata") or {})
        env_id = self.metadata.get("env_id", self.metadata.get("env_name"))
        self.env_id = env_id if isinstance(env_id, str) else None
        return data

    def _stale(self, path: Path) -> bool:
        info = read_info(path, _WHERE)
        if info.get("options") != self._options():
            return True
        return self._source.is_file() and info.get("source") != file_fingerprint(self._source)

    def _convert(self, path: Path) -> None:
        from ._d4rl_convert import d4rl_to_tensordict, read_d4rl_file

        if not self._source.is_file():
            raise FileNotFoundError(
                f"{_WHERE}: D4RL dataset {self.dataset_id!r} not found (looked for the file "
                f"{self._source} and for converted data in {path}). tdrl does not download "
                "D4RL files: download the dataset's .hdf5 file yourself and pass its path as "
                "dataset_id (or place it at <root>/<dataset_id>.hdf5), or use the Minari copy "
                "of the D4RL datasets with MinariExperienceReplay."
            )
        fingerprint = file_fingerprint(self._source)
        tree = read_d4rl_file(self._source)
        data = d4rl_to_tensordict(tree, self.use_truncated_as_done)
        if self.split_trajs:
            data = split_by_done(data)
            data["next", "done"][:, -1] = True
        metadata = tree.get("metadata")
        info = {"kind": "d4rl", "source": fingerprint, "options": self._options()}
        write_cache(path, data, info, _WHERE, {"metadata": metadata or {}})


def _refuse(from_env: Any, direct_download: Any, terminate_on_end: Any, kwargs: Any) -> None:
    if from_env:
        raise ValueError(
            f"{_WHERE}: from_env=True needs the d4rl package and gym, which tdrl does not use "
            "(got from_env=True; expected False). Pass the dataset's .hdf5 file instead."
        )
    if direct_download is False:
        raise ValueError(
            f"{_WHERE}: direct_download=False reads through the d4rl package, which tdrl does "
            "not use (got False; expected None or True). Leave it out: tdrl reads the file."
        )
    if terminate_on_end is False:
        raise ValueError(
            f"{_WHERE}: terminate_on_end=False is not compatible with direct reading (got False; "
            "expected None or True), as in TorchRL with direct_download=True. Leave it out."
        )
    if kwargs:
        raise TypeError(
            f"{_WHERE}: unexpected keyword arguments (got {sorted(kwargs)}; expected none: "
            "TorchRL passes them to the d4rl package). Remove them."
        )
