"""TensorboardLogger: TensorBoard event files through ``torch.utils.tensorboard``."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from tdrl.record.loggers._video import check_video, encode_gif, tile_videos
from tdrl.record.loggers.common import Logger

__all__ = ["TensorboardLogger"]


class TensorboardLogger(Logger):
    """Writes TensorBoard event files to ``<log_dir>/<exp_name>`` (``self.log_dir`` after
    construction).

    Needs the ``tensorboard`` package (``pip install 'tdrl[record]'``). Videos are encoded as
    animated GIFs with Pillow (TensorBoard shows them in its Images tab), so, unlike
    ``SummaryWriter.add_video``, moviepy is not needed.

    Args:
        exp_name: the run's name (a sub-folder of ``log_dir``).
        log_dir: the parent folder (default ``"tb_logs"``).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     logger = TensorboardLogger("exp", log_dir=d)
        ...     logger.log_scalar("loss", 0.5, step=1)
        ...     logger.close()
        ...     logger.log_dir == os.path.join(d, "exp")
        True
    """

    def __init__(self, exp_name: str, log_dir: str = "tb_logs") -> None:
        super().__init__(exp_name=exp_name, log_dir=str(log_dir))
        self.log_dir = self.experiment.log_dir

    def _create_experiment(self) -> Any:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(
                "TensorboardLogger.__init__: TensorBoard is not installed (got no "
                "'tensorboard' module; expected it installed). pip install 'tdrl[record]' "
                "(or pip install tensorboard)."
            ) from err
        assert self.log_dir is not None
        return SummaryWriter(log_dir=os.path.join(self.log_dir, self.exp_name))

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Adds a scalar event."""
        self.experiment.add_scalar(name, value, global_step=step)

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Adds a video (an animated GIF; the N videos of ``[N, T, C, H, W]`` side by side).

        Args:
            name: the tag.
            video: uint8 (or float in ``[0, 1]``) ``((N), T, C, H, W)``, 1 or 3 channels.
            step: the global step.
            **kwargs: ``fps`` (default 4, TensorBoard's) and ``walltime``.

        Raises:
            ValueError: wrong video layout.
            TypeError: an unknown keyword.
        """
        video = check_video(video, "TensorboardLogger.log_video")
        fps = kwargs.pop("fps", 4)
        walltime = kwargs.pop("walltime", None)
        if kwargs:
            raise TypeError(
                f"TensorboardLogger.log_video: unknown arguments (got {sorted(kwargs)}; expected "
                "fps and walltime). Drop them."
            )
        from tensorboard.compat.proto.summary_pb2 import Summary

        frames = tile_videos(video)
        h, w = frames.shape[-2:]
        image = Summary.Image(
            height=h, width=w, colorspace=3, encoded_image_string=encode_gif(frames, fps)
        )
        summary = Summary(value=[Summary.Value(tag=name, image=image)])
        writer = self.experiment._get_file_writer()  # what SummaryWriter.add_video writes to
        writer.add_summary(summary, step, walltime if walltime is not None else time.time())

    def log_hparams(self, cfg: Any) -> None:
        """Adds the hyperparameters (TensorBoard's HParams tab)."""
        self.experiment.add_hparams(self._to_container(cfg), metric_dict={})

    def log_histogram(self, name: str, data: Sequence[Any], **kwargs: Any) -> None:
        """Adds a histogram of ``data``.

        Keyword Args:
            step: the global step.
            bins: numpy's binning rule (default ``"tensorflow"``, TensorBoard's).
            walltime: the event's time (default now).

        Raises:
            TypeError: an unknown keyword.
        """
        step = kwargs.pop("step", None)
        bins = kwargs.pop("bins", "tensorflow")
        walltime = kwargs.pop("walltime", None)
        if kwargs:
            raise TypeError(
                f"TensorboardLogger.log_histogram: unknown arguments (got {sorted(kwargs)}; "
                "expected step, bins and walltime). Drop them."
            )
        self.experiment.add_histogram(
            tag=name, values=data, global_step=step, bins=bins, walltime=walltime
        )

    def log_str(self, name: str, value: str, step: int | None = None) -> None:
        """Adds a text event."""
        self.experiment.add_text(name, value, global_step=step)

    def __repr__(self) -> str:
        return f"TensorboardLogger(experiment={self.experiment!r})"
