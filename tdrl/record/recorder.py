"""TorchRL's ``torchrl.record.recorder`` import path (tdrl's recording transforms).

Examples:
    >>> from tdrl.record.recorder import VideoRecorder
    >>> import tdrl.record
    >>> VideoRecorder is tdrl.record.VideoRecorder
    True
"""

from tdrl.record._recorder import VideoRecorder
from tdrl.record._render import PixelRenderTransform

__all__ = ["PixelRenderTransform", "VideoRecorder"]
