"""CSVLogger: a dependency-free logger writing plain files (TorchRL's on-disk layout).

Layout under ``<log_dir>/<exp_name>/``:

- ``scalars/<name>.csv``: one ``step,value`` line per call (no header; ``/`` in a name makes
  sub-folders).
- ``videos/<tag>_<step>.<ext>``: ``.pt`` (``torch.save`` of the tensor), ``.memmap``
  (a raw :class:`~tensordict.MemoryMappedTensor`), ``.mp4`` or ``.gif``.
- ``texts/<tag><step>.txt``: text, e.g. ``hparams0.txt`` (``key: value`` lines, sorted).
"""

from __future__ import annotations

import numbers
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import torch

from tdrl.record.loggers._video import check_video, has_mp4_encoder, write_gif, write_mp4
from tdrl.record.loggers.common import Logger

__all__ = ["CSVExperiment", "CSVLogger"]

_FORMATS = ("pt", "memmap", "mp4", "gif")


class CSVExperiment:
    """The folder a :class:`CSVLogger` writes to (created with its sub-folders).

    Args:
        log_dir: the experiment folder.
        video_format: ``"pt"``, ``"memmap"``, ``"mp4"`` or ``"gif"``.
        video_fps: frames per second of MP4/GIF videos.
    """

    def __init__(self, log_dir: str, *, video_format: str = "pt", video_fps: int = 30) -> None:
        if video_format not in _FORMATS:
            raise ValueError(
                f"CSVExperiment.__init__: unknown video format (got {video_format!r}; expected "
                f"one of {_FORMATS}). Pick one of them."
            )
        self.log_dir = log_dir
        self.video_format = video_format
        self.video_fps = video_fps
        self.scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.videos_counter: dict[str, int] = defaultdict(int)
        self.text_counter: dict[str, int] = defaultdict(int)
        self.files: dict[str, IO[str]] = {}
        for sub in ("scalars", "videos", "texts"):
            os.makedirs(os.path.join(log_dir, sub), exist_ok=True)

    def _file(self, path: str, mode: str) -> IO[str]:
        fd = self.files.get(path)
        if fd is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = self.files[path] = open(path, mode)
        return fd

    def add_scalar(self, name: str, value: float, global_step: int | None = None) -> None:
        """Appends ``step,value`` to ``scalars/<name>.csv`` (the step defaults to the count of
        values logged under ``name`` so far)."""
        if global_step is None:
            global_step = len(self.scalars[name])
        value = float(value)
        self.scalars[name].append((global_step, value))
        fd = self._file(os.path.join(self.log_dir, "scalars", f"{name}.csv"), "a+")
        fd.write(f"{global_step},{value}\n")
        fd.flush()

    def add_video(
        self, tag: str, vid_tensor: torch.Tensor, global_step: int | None = None, **kwargs: Any
    ) -> Path:
        """Writes ``videos/<tag>_<step>.<ext>`` in the experiment's video format; returns it.

        ``pt`` and ``memmap`` keep the tensor as given; ``mp4`` and ``gif`` play the N videos
        of ``[N, T, C, H, W]`` one after the other. MP4 falls back to GIF (with a warning on
        the ``tdrl`` logger) when PyAV is missing. ``kwargs`` go to the MP4 encoder
        (``fps``, ``video_codec``, ``options``).
        """
        if global_step is None:
            global_step = self.videos_counter[tag]
            self.videos_counter[tag] += 1
        fmt = self.video_format
        if fmt == "mp4" and not has_mp4_encoder():
            from tdrl.utils import logger

            logger.warning(
                "CSVLogger: PyAV is not installed, writing %s as GIF instead of MP4 "
                "(pip install 'tdrl[record]' for MP4).",
                tag,
            )
            fmt = "gif"
        path = Path(self.log_dir, "videos", f"{tag}_{global_step}.{fmt}")
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "pt":
            torch.save(vid_tensor, path)
        elif fmt == "memmap":
            from tensordict import MemoryMappedTensor

            MemoryMappedTensor.from_tensor(vid_tensor, filename=path)
        else:
            frames = check_video(vid_tensor, "CSVLogger.log_video").flatten(0, 1)
            fps = kwargs.pop("fps", self.video_fps)
            if fmt == "mp4":
                write_mp4(path, frames, fps, **kwargs)
            else:
                write_gif(path, frames, fps)
        return path

    def add_text(self, tag: str, text: str, global_step: int | None = None) -> None:
        """Writes ``text`` to ``texts/<tag><step>.txt``."""
        if global_step is None:
            global_step = self.text_counter[tag]
            self.text_counter[tag] += 1
        fd = self._file(os.path.join(self.log_dir, "texts", f"{tag}{global_step}.txt"), "w+")
        fd.writelines(text)
        fd.flush()

    def flush(self) -> None:
        """Flushes the open files."""
        for fd in self.files.values():
            fd.flush()

    def close(self) -> None:
        """Closes the open files (new writes reopen them)."""
        for fd in self.files.values():
            fd.close()
        self.files = {}

    def __getstate__(self) -> dict[str, Any]:
        # open files do not pickle (a recorder sent to a worker process, a deep copy): the
        # copy reopens them in append mode when it writes
        state = dict(self.__dict__)
        state["files"] = {}
        return state

    def __repr__(self) -> str:
        return f"CSVExperiment(log_dir={self.log_dir})"

    def __del__(self) -> None:
        for fd in getattr(self, "files", {}).values():
            fd.close()


class CSVLogger(Logger):
    """A logger writing CSV, text and video files, with no dependency (TorchRL's layout).

    Args:
        exp_name: the experiment's name: files go to ``<log_dir>/<exp_name>/``.
        log_dir: the parent folder (default ``"csv_logs"``).
        video_format: ``"pt"`` (default, ``torch.save`` of the video tensor), ``"memmap"``,
            ``"mp4"`` (needs PyAV; GIF when missing) or ``"gif"``.
        video_fps: frames per second of MP4 and GIF videos.

    Examples:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     logger = CSVLogger("exp", log_dir=d, video_format="gif")
        ...     logger.log_scalar("loss", 0.5, step=10)
        ...     logger.log_video("run", torch.zeros(1, 4, 3, 8, 8, dtype=torch.uint8))
        ...     logger.log_hparams({"lr": 0.1})
        ...     logger.close()
        ...     print(open(f"{d}/exp/scalars/loss.csv").read().strip())
        ...     print(sorted(os.listdir(f"{d}/exp/videos")), os.listdir(f"{d}/exp/texts"))
        10,0.5
        ['run_0.gif'] ['hparams0.txt']
    """

    experiment: CSVExperiment

    def __init__(
        self,
        exp_name: str,
        log_dir: str | None = None,
        video_format: str = "pt",
        video_fps: int = 30,
    ) -> None:
        if log_dir is None:
            log_dir = "csv_logs"
        self.video_format = video_format
        self.video_fps = video_fps
        super().__init__(exp_name=exp_name, log_dir=str(log_dir))

    def _create_experiment(self) -> CSVExperiment:
        assert self.log_dir is not None
        return CSVExperiment(
            os.path.join(self.log_dir, self.exp_name),
            video_format=self.video_format,
            video_fps=self.video_fps,
        )

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Appends ``step,value`` to ``scalars/<name>.csv``.

        Raises:
            TypeError: ``value`` is not a single number.
        """
        if isinstance(value, torch.Tensor):
            value = value.item() if value.numel() == 1 else value.tolist()
        if not isinstance(value, numbers.Real):
            raise TypeError(
                f"CSVLogger.log_scalar: {name!r} is not a single number (got "
                f"{type(value).__name__} {str(value)[:60]}; expected an int, a float or a "
                "one-element tensor). Log each element under its own name."
            )
        self.experiment.add_scalar(name, value, global_step=step)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Writes ``videos/<name>_<step>.<format>`` (see :class:`CSVExperiment`).

        Raises:
            ValueError: ``video`` is not ``((N), T, C, H, W)`` with 1 or 3 channels.
        """
        check_video(video, "CSVLogger.log_video")
        if video.ndim != 5:
            raise ValueError(
                f"CSVLogger.log_video: wrong video layout (got {tuple(video.shape)}; expected "
                "a tensor of shape (N, T, C, H, W) with C in (1, 3)). Add the leading N: "
                "video.unsqueeze(0)."
            )
        self.experiment.add_video(tag=name, vid_tensor=video, global_step=step, **kwargs)

    def log_hparams(self, cfg: Any) -> None:
        """Writes ``texts/hparams<k>.txt``: one ``key: value`` line per entry, sorted."""
        cfg = self._to_container(cfg)
        self.experiment.add_text("hparams", "\n".join(f"{k}: {v}" for k, v in sorted(cfg.items())))

    def log_str(self, name: str, value: str, step: int | None = None) -> None:
        """Writes ``texts/<name><step>.txt``."""
        self.experiment.add_text(name, value, global_step=step)

    def log_histogram(self, name: str, data: Sequence[Any], **kwargs: Any) -> None:
        """Not available in CSV files (TorchRL's behaviour).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            f"CSVLogger.log_histogram: CSV files hold no histograms (got name={name!r}). Use "
            "TensorboardLogger or WandbLogger for histograms."
        )

    def print_log_dir(self) -> None:
        """Prints the experiment folder's tree."""
        root = Path(self.experiment.log_dir)
        for path in sorted(root.rglob("*")):
            depth = len(path.relative_to(root).parts) - 1
            print("    " * depth + path.name + ("/" if path.is_dir() else ""))

    def __repr__(self) -> str:
        return f"CSVLogger(exp_name={self.exp_name}, experiment={self.experiment!r})"
