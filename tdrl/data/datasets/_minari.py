"""``MinariExperienceReplay``: a Minari dataset as a read-only, memory-mapped replay buffer."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tensordict import TensorDictBase

from tdrl.data.replay import Sampler, Writer
from tdrl.errors import CheckpointError

from ._common import (
    BaseDatasetExperienceReplay,
    check_dataset_id,
    default_root,
    file_fingerprint,
    read_cache,
    read_info,
    remove_dataset,
    write_cache,
)
from ._spaces import space_json_to_spec
from ._split import split_by_done

__all__ = ["MinariExperienceReplay", "minari_datasets_path"]

_WHERE = "MinariExperienceReplay.__init__"


def minari_datasets_path() -> Path:
    """The local Minari cache: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets`` (Minari's)."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


@contextlib.contextmanager
def _datasets_path(path: Path) -> Iterator[None]:
    """Points Minari at ``path`` for the duration (Minari reads only this variable)."""
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


def _import_minari() -> Any:
    try:
        import minari
    except ImportError as err:
        raise ImportError(
            f"{_WHERE}: the minari package is not installed (got ImportError: {err}; expected "
            "minari>=0.5). Install it with pip install 'tdrl[offline]'."
        ) from err
    return minari


class _AvailableDatasets:
    """``MinariExperienceReplay.available_datasets``: the ids in the local Minari cache."""

    def __get__(self, obj: Any, owner: Any = None) -> list[str]:
        return sorted(_import_minari().list_local_datasets().keys())


class MinariExperienceReplay(BaseDatasetExperienceReplay):
    """A Minari dataset as a read-only replay buffer (TorchRL's class, values included).

    The dataset is read once through the ``minari`` package (``pip install 'tdrl[offline]'``)
    and converted into memory-mapped files under ``<root>/<dataset_id>``; later opens map those
    files without reading the Minari dataset again. The conversion is written to a temporary
    folder renamed into place when complete, so a failed or killed conversion leaves nothing a
    later open would use.

    Where the data comes from: with ``load_from_local_minari=True``, the local Minari cache
    (``$MINARI_DATASETS_PATH``, default ``~/.minari/datasets``: datasets made with Minari's
    ``DataCollector`` or ``tdrl dataset collect``); the conversion is redone when the cached
    Minari file changed. Otherwise the local Minari cache when it holds the dataset, else
    ``minari.download_dataset`` (into a temporary folder) when ``download`` is true. A dataset
    found nowhere raises ``FileNotFoundError`` naming the id, the places looked and how to
    make it.

    Layout (TorchRL's TED format; ``N`` steps of all episodes, in episode-id order):
    ``observation`` (nested for ``Dict`` spaces), ``action``, ``episode`` (int64 Minari episode
    id), ``info`` (when recorded), and ``("next", ...)``: ``observation``, ``reward`` ``[N, 1]``,
    ``done``/``terminated``/``truncated`` (bool ``[N, 1]``), ``info``. Values and dtypes are
    the Minari dataset's (rewards are usually float64). Text entries are not stored.

    Args:
        dataset_id: the Minari id (``"namespace/name-vN"``).
        batch_size: the default sample size.

    Keyword Args:
        root: where converted datasets go (default ``~/.cache/tdrl/minari``).
        download: whether a dataset found nowhere locally may be downloaded; ``"force"``
            converts again even when converted data exists.
        sampler: the sampler (default :class:`~tdrl.data.RandomSampler`); a
            :class:`~tdrl.data.SliceSampler` with ``traj_key="episode"`` samples
            sub-trajectories.
        writer: the writer (default :class:`ImmutableDatasetWriter`: the data is read-only).
        collate_fn, pin_memory, prefetch, transform: as :class:`~tdrl.data.ReplayBuffer`.
        split_trajs: store ``[num_episodes, max_len]`` zero-padded rows (with ``"mask"`` and
            ``"traj_ids"``) in ``<root>/<dataset_id>_split``; episodes end at ``done``.
        load_from_local_minari: read the local Minari cache (never download).

    Attributes:
        metadata: TorchRL's: the Minari dataset spec as a dict (``total_steps``,
            ``env_spec``, ...), ``observation_space``/``action_space`` as tdrl specs.
        env_id: the gymnasium id in the dataset's ``env_spec`` (``None`` without one).
        available_datasets: the ids in the local Minari cache (TorchRL lists the remote ones).

    Examples:
        >>> import tempfile, gymnasium as gym, minari
        >>> tmp = tempfile.mkdtemp()
        >>> os.environ["MINARI_DATASETS_PATH"] = tmp + "/minari"
        >>> env = minari.DataCollector(gym.make("CartPole-v1", max_episode_steps=5))
        >>> for seed in range(2):
        ...     _ = env.reset(seed=seed)
        ...     for _ in range(5):
        ...         _ = env.step(0)
        >>> _ = env.create_dataset(dataset_id="doc/cartpole/zeros-v0", algorithm_name="zero")
        >>> data = MinariExperienceReplay("doc/cartpole/zeros-v0", batch_size=4,
        ...                               root=tmp + "/tdrl", load_from_local_minari=True)
        >>> len(data), data.env_id, data[:]["episode"].tolist()
        (10, 'CartPole-v1', [0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
        >>> data.sample()["next", "reward"].shape
        torch.Size([4, 1])
        >>> del os.environ["MINARI_DATASETS_PATH"]
    """

    available_datasets = _AvailableDatasets()

    def __init__(
        self,
        dataset_id: str,
        batch_size: int,
        *,
        root: str | Path | None = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        split_trajs: bool = False,
        load_from_local_minari: bool = False,
    ) -> None:
        if download not in (True, False, "force"):
            raise ValueError(
                f"{_WHERE}: invalid download (got {download!r}; expected True, False or "
                "'force'). Pass one of them."
            )
        self.dataset_id = check_dataset_id(_WHERE, dataset_id)
        self.root = default_root("minari") if root is None else root
        self.download = download
        self.split_trajs = bool(split_trajs)
        self.load_from_local_minari = bool(load_from_local_minari)
        data = self._open()
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

    @property
    def data_path_root(self) -> Path:
        """``<root>/<dataset_id>``: the converted dataset."""
        return self.root / self.dataset_id

    @property
    def data_path(self) -> Path:
        """The folder the buffer maps (``<root>/<dataset_id>_split`` with ``split_trajs``)."""
        if self.split_trajs:
            return self.root / f"{self.dataset_id}_split"
        return self.data_path_root

    @property
    def _local_file(self) -> Path:
        return minari_datasets_path() / self.dataset_id / "data" / "main_data.hdf5"

    def _open(self) -> TensorDictBase:
        if self.download == "force":
            remove_dataset(self.data_path)
            remove_dataset(self.data_path_root)
        if not self._is_downloaded() or self._stale():
            self._convert()
        if self.split_trajs and (not self.data_path.is_dir() or self._split_stale()):
            data, _, info = read_cache(self.data_path_root, _WHERE)
            write_cache(self.data_path, split_by_done(data), info, _WHERE)
        data, _, info = read_cache(self.data_path, _WHERE)
        self._set_metadata(info.get("metadata"))
        return data

    def _stale(self) -> bool:
        """With ``load_from_local_minari``: whether the Minari file changed since conversion."""
        if not self.load_from_local_minari or not self._local_file.is_file():
            return False
        source = read_info(self.data_path_root, _WHERE).get("source")
        return source != file_fingerprint(self._local_file)

    def _split_stale(self) -> bool:
        split = read_info(self.data_path, _WHERE).get("source")
        return split != read_info(self.data_path_root, _WHERE).get("source")

    def _convert(self) -> None:
        local = self._local_file
        if local.is_file():
            self._convert_from(minari_datasets_path(), file_fingerprint(local))
        elif self.load_from_local_minari or not self.download:
            raise self._missing(None)
        else:
            with tempfile.TemporaryDirectory(prefix="tdrl-minari-") as tmp:
                try:
                    with _datasets_path(Path(tmp)):
                        _import_minari().download_dataset(self.dataset_id)
                except Exception as err:
                    raise self._missing(err) from err
                self._convert_from(Path(tmp), None)

    def _convert_from(self, datasets_path: Path, fingerprint: dict[str, int] | None) -> None:
        from ._minari_convert import LayoutError, dataset_metadata, episodes_to_tensordict

        minari = _import_minari()
        file = datasets_path / self.dataset_id / "data" / "main_data.hdf5"
        with _datasets_path(datasets_path):
            try:
                dataset = minari.load_dataset(self.dataset_id)
                data = episodes_to_tensordict(dataset)
                metadata = dataset_metadata(dataset)
            except (CheckpointError, LayoutError, ImportError):
                raise
            except Exception as err:
                raise CheckpointError(
                    f"{_WHERE}: cannot read the Minari dataset {self.dataset_id!r} in {file} "
                    f"({type(err).__name__}: {err}). The file is truncated or corrupted: "
                    "record or download the dataset again."
                ) from err
        info = {"kind": "minari", "source": fingerprint, "metadata": metadata}
        write_cache(self.data_path_root, data, info, _WHERE)

    def _missing(self, err: BaseException | None) -> FileNotFoundError:
        tried = f"; the download failed ({type(err).__name__}: {err})" if err else ""
        return FileNotFoundError(
            f"{_WHERE}: dataset {self.dataset_id!r} not found (looked for converted data in "
            f"{self.data_path_root} and for the Minari dataset in "
            f"{minari_datasets_path() / self.dataset_id}, the local Minari cache "
            f"$MINARI_DATASETS_PATH{tried}). Make it with Minari's DataCollector "
            "(minari.DataCollector(env) ... create_dataset(dataset_id=...)) or with "
            f"`tdrl dataset collect RUN_DIR --out {self.dataset_id}`, or place an existing "
            "Minari dataset under $MINARI_DATASETS_PATH/<dataset_id>/data/."
        )

    def _set_metadata(self, metadata: Any) -> None:
        meta = dict(metadata) if isinstance(metadata, dict) else {}
        env_spec = meta.get("env_spec")
        self.env_id = env_spec.get("id") if isinstance(env_spec, dict) else None
        for key in ("observation_space", "action_space"):
            meta[key] = space_json_to_spec(meta.get(key))
        self.metadata = meta
