"""Recording: experiment loggers and the transforms that film an env (TorchRL's
``torchrl.record``).

- Loggers (:mod:`tdrl.record.loggers`): :class:`CSVLogger`, :class:`TensorboardLogger`,
  :class:`WandbLogger`, :class:`MLFlowLogger`; ``get_logger`` and ``generate_exp_name``.
- :class:`VideoRecorder`: keeps the ``"pixels"`` frames of every reset and step and writes
  them as a video through a logger on ``dump()``.
- :class:`PixelRenderTransform`: writes the env's ``render()`` image as ``"pixels"``.

Examples:
    >>> import os, tempfile
    >>> from tdrl.envs.transforms import TransformedEnv
    >>> from tdrl.record import CSVLogger, VideoRecorder
    >>> from tdrl.testing import TransformTestEnv
    >>> with tempfile.TemporaryDirectory() as d:
    ...     logger = CSVLogger("exp", log_dir=d, video_format="mp4")
    ...     recorder = VideoRecorder(logger, tag="rollout", skip=1)
    ...     env = TransformedEnv(TransformTestEnv(), recorder)
    ...     _ = env.rollout(4)
    ...     recorder.dump()
    ...     sorted(os.listdir(f"{d}/exp/videos"))
    ['rollout_0.mp4']
"""

from tdrl.record._recorder import VideoRecorder
from tdrl.record._render import PixelRenderTransform
from tdrl.record.loggers import (
    CSVLogger,
    MLFlowLogger,
    TensorboardLogger,
    WandbLogger,
)

__all__ = [
    "CSVLogger",
    "MLFlowLogger",
    "PixelRenderTransform",
    "TensorboardLogger",
    "VideoRecorder",
    "WandbLogger",
]
