"""Video encoding for the loggers: MP4 through PyAV (FFmpeg in its wheel), GIF as fallback.

PyAV (``pip install av``, part of ``tdrl[record]``) ships FFmpeg's libraries with libx264 in its
wheels, encodes in-process (no ffmpeg executable, no pipes) and also decodes, which the tests
use to check what was written. Without it, videos are written as GIF through Pillow.
"""

from __future__ import annotations

import importlib.util
import io
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "check_video",
    "encode_gif",
    "has_mp4_encoder",
    "tile_videos",
    "to_uint8",
    "write_gif",
    "write_mp4",
]

_VIDEO_RULE = "a tensor of shape ((N), T, C, H, W) with C in (1, 3)"


def has_mp4_encoder() -> bool:
    """Whether PyAV is installed (MP4 encoding)."""
    return importlib.util.find_spec("av") is not None


def check_video(video: Any, where: str) -> torch.Tensor:
    """``video`` as a 5-d ``[N, T, C, H, W]`` tensor (a 4-d one gets ``N = 1``).

    Raises:
        ValueError: not a tensor of that layout.
    """
    if not isinstance(video, torch.Tensor) or video.ndim not in (4, 5):
        shape = tuple(video.shape) if isinstance(video, torch.Tensor) else type(video).__name__
        raise ValueError(
            f"{where}: wrong video layout (got {shape}; expected {_VIDEO_RULE}). Stack the "
            "frames along T and put the channels before height and width."
        )
    if video.ndim == 4:
        video = video.unsqueeze(0)
    if video.shape[2] not in (1, 3):
        raise ValueError(
            f"{where}: wrong number of colour channels (got shape {tuple(video.shape)}; "
            f"expected {_VIDEO_RULE}). Permute channels-last frames with "
            "video.permute(0, 1, 4, 2, 3)."
        )
    return video


def to_uint8(video: torch.Tensor) -> torch.Tensor:
    """uint8 frames: uint8 is kept, floating point values in ``[0, 1]`` are scaled by 255."""
    video = video.detach().cpu()
    if video.dtype == torch.uint8:
        return video
    if video.is_floating_point():
        return (video.float() * 255).round().clamp(0, 255).to(torch.uint8)
    return video.clamp(0, 255).to(torch.uint8)


def tile_videos(video: torch.Tensor) -> torch.Tensor:
    """``[N, T, C, H, W]`` -> ``[T, C, rows * H, cols * W]``: the N videos side by side.

    The layout is TensorBoard's (and W&B's): N is padded with black videos to a power of two,
    ``rows = 2 ** ((N.bit_length() - 1) // 2)``, ``cols = padded N // rows``.
    """
    n, t, c, h, w = video.shape
    padded = 1 << (n - 1).bit_length() if n > 1 else 1
    if padded != n:
        video = torch.cat([video, video.new_zeros(padded - n, t, c, h, w)])
    rows = 2 ** ((n.bit_length() - 1) // 2)
    cols = padded // rows
    grid = video.reshape(rows, cols, t, c, h, w).permute(2, 3, 0, 4, 1, 5)
    return grid.reshape(t, c, rows * h, cols * w)


def _hwc_rgb(frames: torch.Tensor) -> Any:
    """``[T, C, H, W]`` (C 1 or 3) -> a contiguous uint8 numpy ``[T, H, W, 3]``."""
    frames = to_uint8(frames).permute(0, 2, 3, 1)
    frames = frames.expand(*frames.shape[:-1], 3)
    return frames.contiguous().numpy()


def write_mp4(
    path: str | Path,
    frames: torch.Tensor,
    fps: float = 30,
    *,
    video_codec: str | None = None,
    options: dict[str, Any] | None = None,
) -> Path:
    """Encodes ``[T, C, H, W]`` frames as an H.264 MP4 (yuv420p, CRF 23 unless set).

    yuv420p needs even sizes: an odd height or width gets its last row or column repeated.

    Args:
        path: the file to write.
        frames: uint8 (or float in ``[0, 1]``) frames, 1 or 3 channels.
        fps: frames per second.
        video_codec: an FFmpeg encoder name (default ``"libx264"``).
        options: encoder options, e.g. ``{"crf": "17", "preset": "slow"}``; ``pixel_format``
            picks the pixel format.

    Raises:
        ImportError: PyAV is not installed.
    """
    try:
        import av
    except ImportError as err:
        raise ImportError(
            "write_mp4: MP4 videos need PyAV (got no 'av' module; expected it installed). "
            "pip install 'tdrl[record]' (or pip install av), or log GIF videos."
        ) from err
    data = _hwc_rgb(frames)
    _, h, w, _ = data.shape
    if h % 2 or w % 2:
        pad = torch.from_numpy(data)
        pad = torch.cat([pad, pad[:, -1:]], 1) if h % 2 else pad
        pad = torch.cat([pad, pad[:, :, -1:]], 2) if w % 2 else pad
        data = pad.contiguous().numpy()
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    pixel_format = opts.pop("pixel_format", "yuv420p")
    opts.setdefault("crf", "23")
    with av.open(str(path), mode="w") as container:
        stream: Any = container.add_stream(
            video_codec or "libx264", rate=Fraction(fps).limit_denominator(1000)
        )
        stream.width, stream.height = data.shape[2], data.shape[1]
        stream.pix_fmt = pixel_format
        stream.options = opts
        for frame in data:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return Path(path)


def encode_gif(frames: torch.Tensor, fps: float = 4) -> bytes:
    """``[T, C, H, W]`` frames as the bytes of a looping GIF (Pillow).

    Pillow merges identical consecutive frames into one longer frame: the timing is kept,
    the frame count of a still stretch is not.
    """
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError(
            "encode_gif: GIF videos need Pillow (got no 'PIL' module; expected it installed). "
            "pip install 'tdrl[record]'."
        ) from err
    data = _hwc_rgb(frames)
    images = [Image.fromarray(frame) for frame in data]
    out = io.BytesIO()
    duration = max(1, math.floor(1000 / max(fps, 1e-3)))
    images[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=duration,
        loop=0,
        optimize=False,
    )
    return out.getvalue()


def write_gif(path: str | Path, frames: torch.Tensor, fps: float = 30) -> Path:
    """Writes ``[T, C, H, W]`` frames as a looping GIF."""
    Path(path).write_bytes(encode_gif(frames, fps))
    return Path(path)
