"""Rendered frames as a ``"pixels"`` observation (TorchRL's ``from_pixels``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tdrl.specs import Unbounded

__all__ = ["PixelReader"]


class PixelReader:
    """Reads ``env.render()`` (an ``rgb_array`` frame, uint8 ``H x W x 3``) as a tensor.

    Args:
        env: a gymnasium env built with ``render_mode="rgb_array"`` (reset already).
        owner: the class name used in error messages.
        device: device of the spec.

    Raises:
        ValueError: the env does not render ``rgb_array`` frames, or a frame is not
            ``H x W x 3``.
    """

    def __init__(self, env: Any, owner: str, device: torch.device | None) -> None:
        mode = getattr(env, "render_mode", None)
        if mode != "rgb_array":
            raise ValueError(
                f"{owner}.__init__: from_pixels needs an env that renders rgb_array frames (got "
                f"render_mode={mode!r}; expected 'rgb_array'). Build it with "
                "gymnasium.make(name, render_mode='rgb_array'), or use GymEnv(name, "
                "from_pixels=True)."
            )
        self.env = env
        self.owner = owner
        frame = self.read()
        self.spec = Unbounded(shape=frame.shape, dtype=torch.uint8, device=device)

    def read(self) -> torch.Tensor:
        """The current frame as a uint8 ``[H, W, 3]`` tensor (a copy)."""
        frame = np.array(self.env.render(), dtype=np.uint8)
        if frame.ndim != 3 or frame.shape[-1] != 3:
            raise ValueError(
                f"{self.owner}: render() returned a frame of shape {frame.shape} (expected "
                "H x W x 3 uint8). Use an env whose rgb_array render gives RGB frames."
            )
        return torch.from_numpy(frame)
