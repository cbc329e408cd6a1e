"""VideoRecorder: a transform that keeps the frames an env produces and writes them as a video."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.transforms import ObservationTransform

__all__ = ["VideoRecorder"]


def make_video_grid(frames: torch.Tensor) -> torch.Tensor:
    """``[N, C, H, W]`` -> ``[C, rows * H, cols * W]``: ``cols = ceil(sqrt(N))``, row-major,
    black where the grid has no frame."""
    n, c, h, w = frames.shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    if rows * cols != n:
        frames = torch.cat([frames, frames.new_zeros(rows * cols - n, c, h, w)])
    grid = frames.reshape(rows, cols, c, h, w).permute(2, 0, 3, 1, 4)
    return grid.reshape(c, rows * h, cols * w)


def center_crop(frames: torch.Tensor, size: int) -> torch.Tensor:
    """The central ``size x size`` window of ``[..., H, W]`` frames (zero-padded where the
    frame is smaller), placed as torchvision's ``center_crop`` places it."""
    h, w = frames.shape[-2:]
    if size > h or size > w:
        ph, pw = max(size - h, 0), max(size - w, 0)
        pads = (pw // 2, (pw + 1) // 2, ph // 2, (ph + 1) // 2)
        frames = torch.nn.functional.pad(frames, pads)
        h, w = frames.shape[-2:]
    top = round((h - size) / 2.0)
    left = round((w - size) / 2.0)
    return frames[..., top : top + size, left : left + size]


class VideoRecorder(ObservationTransform):
    """Keeps the frames of ``in_keys`` at every reset and step; :meth:`dump` writes them.

    Frames may be ``[..., H, W, C]`` or ``[..., C, H, W]`` with C in (1, 3) (one channel is
    repeated to three, as in TorchRL), or a single ``[H, W]`` (kept with one channel); they
    are stored as uint8 ``[C, H, W]`` copies on the CPU (float frames are cast, not scaled). Inside a batched env the members of a frame are tiled in a grid (``make_grid``).
    :meth:`dump` stacks the frames to a ``[1, T, C, H, W]`` video, passes it to
    ``logger.log_video(tag, video, step=...)`` and clears them. The data is not changed.

    Args:
        logger: where :meth:`dump` writes (any :class:`~tdrl.record.loggers.Logger`); None
            keeps the frames without writing them.
        tag: the video's name in the logger.
        in_keys: the frame entries (default ``["pixels"]``).
        skip: keep one frame in ``skip``. Default: 2 inside an env without batch dims,
            1 otherwise (TorchRL's defaults).
        center_crop: keep the central ``center_crop x center_crop`` window.
        make_grid: tile the frames of a batch into one frame (default: True inside an env,
            False outside, where a batch of frames is a sequence).
        out_keys: also write each frame under these keys (default: none, ``in_keys``).
        fps: the video's frames per second (default: the logger's).
        max_frames: keep at most this many frames until the next :meth:`dump`.
        dump_on_done: call :meth:`dump` when every ``"done"`` entry of a step is true.
        **kwargs: passed to ``logger.log_video``.

    Examples:
        >>> import tempfile
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.record.loggers import CSVLogger
        >>> from tdrl.testing import TransformTestEnv
        >>> with tempfile.TemporaryDirectory() as d:
        ...     logger = CSVLogger("exp", log_dir=d, video_format="pt")
        ...     env = TransformedEnv(TransformTestEnv(), VideoRecorder(logger, "rollout", skip=1))
        ...     _ = env.rollout(3)
        ...     env.transform.dump()
        ...     torch.load(f"{d}/exp/videos/rollout_0.pt").shape
        torch.Size([1, 4, 3, 6, 8])
    """

    def __init__(
        self,
        logger: Any,
        tag: str | None,
        in_keys: Sequence[NestedKey] | None = None,
        skip: int | None = None,
        center_crop: int | None = None,
        make_grid: bool | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        fps: int | None = None,
        max_frames: int | None = None,
        dump_on_done: bool = False,
        **kwargs: Any,
    ) -> None:
        for name, value in (
            ("skip", skip),
            ("max_frames", max_frames),
            ("center_crop", center_crop),
        ):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(
                    f"VideoRecorder.__init__: {name} must be a positive int (got {value!r}; "
                    f"expected 1, 2, ... or None). Pass a positive {name}."
                )
        in_keys = ["pixels"] if in_keys is None else list(in_keys)
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self.logger = logger
        self.tag = tag
        self._skip: int | None = skip
        self.center_crop = center_crop
        self._make_grid: bool | None = make_grid
        self.max_frames = max_frames
        self.dump_on_done = dump_on_done
        self.video_kwargs = dict(kwargs)
        if fps is not None:
            self.video_kwargs["fps"] = fps
        self.iter = 0
        self.count = 0
        self.obs: list[torch.Tensor] = []

    # ------------------------------------------------------------------ defaults
    @property
    def skip(self) -> int:
        """Keep one frame in ``skip`` (resolved from the env on first use when None)."""
        if self._skip is None:
            parent = self.parent
            if parent is None:
                return 1
            self._skip = 2 if len(parent.batch_size) == 0 else 1
        return self._skip

    @skip.setter
    def skip(self, value: int | None) -> None:
        self._skip = value

    @property
    def make_grid(self) -> bool:
        """Tile a batch of frames into one frame (resolved from the env when None)."""
        if self._make_grid is None:
            if self.parent is None:
                return False
            self._make_grid = True
        return self._make_grid

    @make_grid.setter
    def make_grid(self, value: bool | None) -> None:
        self._make_grid = value

    # ------------------------------------------------------------------ frames
    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = tensordict.get(in_key, None)
            if value is None:
                raise self._missing_key(in_key, tensordict, "_call")
            self._record(value)
            if out_key != in_key:
                tensordict.set(out_key, value)
        return tensordict

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        next_tensordict = self._call(next_tensordict)
        if self.dump_on_done and self._all_done(next_tensordict):
            self.dump()
        return next_tensordict

    def _all_done(self, next_tensordict: TensorDictBase) -> bool:
        parent = self.parent
        keys = [k for k in parent.done_keys if _last(k) == "done"] if parent else ["done"]
        dones = [d for d in (next_tensordict.get(k, None) for k in keys) if d is not None]
        return bool(dones) and all(bool(d.all()) for d in dones)

    def _record(self, value: Any) -> None:
        self.count += 1
        if self.count % self.skip:
            return
        if self.max_frames is not None and len(self.obs) >= self.max_frames:
            return
        frame = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
        frame = self._channels_first(frame)
        if self.center_crop:
            frame = center_crop(frame, self.center_crop)
        if frame.ndim >= 4 and self.make_grid:
            grid = make_video_grid(frame.flatten(0, -4))
            self.obs.append(grid.to("cpu", torch.uint8, copy=True))
        elif frame.ndim >= 4:
            frames = frame.flatten(0, -4)
            if self.max_frames is not None:
                frames = frames[: self.max_frames - len(self.obs)]
            self.obs.extend(frames.to("cpu", torch.uint8, copy=True).unbind(0))
        else:
            self.obs.append(frame.to("cpu", torch.uint8, copy=True))

    def _channels_first(self, frame: torch.Tensor) -> torch.Tensor:
        """``[..., C, H, W]`` (C = 3, or 1 for a ``[H, W]`` frame) from the accepted layouts:
        one-channel frames are repeated to three, as in TorchRL."""
        if frame.ndim == 2:
            return frame.unsqueeze(-3)
        if frame.ndim >= 3 and frame.shape[-3] in (1, 3) and min(frame.shape[-2:]) > 3:
            chw = frame
        elif frame.ndim >= 3 and frame.shape[-1] in (1, 3):
            chw = frame.movedim(-1, -3)
        else:
            raise RuntimeError(
                f"VideoRecorder._call: {self.in_keys} holds no frame (got shape "
                f"{tuple(frame.shape)}; expected [..., H, W, C], [..., C, H, W] with C in "
                "(1, 3), or [H, W]). Point in_keys at the image entry."
            )
        if chw.shape[-3] == 1:
            chw = chw.expand(*chw.shape[:-3], 3, *chw.shape[-2:])
        return chw

    # ------------------------------------------------------------------ output
    def dump(self, suffix: str | None = None, step: int | None = None) -> None:
        """Writes the kept frames as one video through the logger, then forgets them.

        No frame kept: nothing is written. Either way the dump counter (the default ``step``)
        goes up by one and the skip counter restarts.

        Args:
            suffix: appended to the tag as ``"<tag>_<suffix>"``.
            step: the logger step (default: the number of earlier dumps).

        Raises:
            RuntimeError: the frames differ in shape (the env changed its image size).
        """
        frames, self.obs = self.obs, []
        if frames and self.logger is not None:
            shapes = {tuple(f.shape) for f in frames}
            if len(shapes) > 1:
                raise RuntimeError(
                    f"VideoRecorder.dump: the frames differ in shape (got {sorted(shapes)}; "
                    "expected one shape). Record one image size per video."
                )
            tag = self.tag if suffix is None else f"{self.tag}_{suffix}"
            video = torch.stack(frames, 0).unsqueeze(0)
            self.logger.log_video(
                name=tag,
                video=video,
                step=self.iter if step is None else step,
                **self.video_kwargs,
            )
        self.iter += 1
        self.count = 0

    def to_animation(
        self,
        *,
        title: str | None = None,
        interval: int = 50,
        repeat_delay: int = 1000,
        clear: bool = False,
    ) -> Any:
        """The kept frames as a matplotlib ``ArtistAnimation`` (for notebooks).

        Raises:
            RuntimeError: no frame was kept.
            ImportError: matplotlib is missing.
        """
        if not self.obs:
            raise RuntimeError(
                "VideoRecorder.to_animation: no frame was recorded (got 0 frames; expected at "
                "least one). Run the env (reset/step) before asking for the animation."
            )
        import matplotlib.animation as animation
        import matplotlib.pyplot as plt

        fig, axis = plt.subplots()
        axis.set_axis_off()
        if title is not None:
            axis.set_title(title)
        artists = []
        for frame in self.obs:
            image = frame.permute(1, 2, 0).expand(*frame.shape[1:], 3).numpy()
            artists.append([axis.imshow(image, animated=True)])
        out = animation.ArtistAnimation(
            fig, artists, interval=interval, blit=True, repeat_delay=repeat_delay
        )
        if clear:
            self.obs = []
            self.count = 0
        return out

    def extra_repr(self) -> str:
        return f"tag={self.tag!r}, in_keys={self.in_keys}, frames={len(self.obs)}"


def _last(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[-1]
