"""Stand-ins that let TorchRL 0.14.1 run in the reference venv (TorchRL's side only).

1. Segment trees.

TorchRL 0.14.1's wheel carries a C++ extension (``torchrl._torchrl``) with the sum/min segment
trees of ``PrioritizedSampler``; in the reference venv it fails to load against torch 2.13
(an undefined symbol), and TorchRL then refuses to build a prioritized sampler. The sampling
rules (``alpha``, ``beta``, ``eps``, weights, max priority) are TorchRL's Python code; the trees
only store values, sum/min ranges and find where a cumulative mass falls. This module gives
those four operations in a few lines of torch so that TorchRL's sampler runs unchanged.
``install()`` is a no-op when the extension loads.

2. torchvision. TorchRL's ``Resize``/``CenterCrop`` call torchvision's tensor functions (pure
torch). The only torchvision on PyPI for torch 2.13 is built against CUDA torch: its C++ ops
(detection kernels, unused here) do not load on the reference venv's CPU torch, and its import
then fails registering fake kernels for ``torchvision::nms``/``qnms``. Declaring their schemas first
lets the import go through; the image functions TorchRL uses are untouched.
"""

from __future__ import annotations

from typing import Any

import torch


class _Tree:
    reduce: str = "sum"

    def __init__(self, size: int, dtype: torch.dtype) -> None:
        neutral = 0.0 if self.reduce == "sum" else float("inf")
        self.values = torch.full((size,), neutral, dtype=dtype)
        self.neutral = neutral

    def __len__(self) -> int:
        return self.values.numel()

    @property
    def size(self) -> int:
        return self.values.numel()

    def __getitem__(self, index: Any) -> Any:
        out = self.values[torch.as_tensor(index, dtype=torch.long)]
        return out.item() if out.ndim == 0 else out

    def __setitem__(self, index: Any, value: Any) -> None:
        index = torch.as_tensor(index, dtype=torch.long)
        self.values[index] = torch.as_tensor(value, dtype=self.values.dtype)

    def update(self, index: Any, value: Any) -> None:
        self[index] = value

    def at(self, index: Any) -> Any:
        return self[index]

    def query(self, left: Any, right: Any) -> float:
        part = self.values[int(left) : int(right)]
        if part.numel() == 0:
            return self.neutral
        return float(part.sum() if self.reduce == "sum" else part.min())

    def scan_lower_bound(self, mass: Any) -> torch.Tensor:
        """Smallest index whose inclusive prefix sum exceeds ``mass`` (the sum-tree search)."""
        cumsum = self.values.to(torch.float64).cumsum(0)
        mass = torch.as_tensor(mass, dtype=torch.float64)
        return torch.searchsorted(cumsum, mass, right=True)


class SumTree32(_Tree):
    def __init__(self, size: int) -> None:
        super().__init__(size, torch.float32)


class SumTree64(_Tree):
    def __init__(self, size: int) -> None:
        super().__init__(size, torch.float64)


class MinTree32(_Tree):
    reduce = "min"

    def __init__(self, size: int) -> None:
        super().__init__(size, torch.float32)


class MinTree64(_Tree):
    reduce = "min"

    def __init__(self, size: int) -> None:
        super().__init__(size, torch.float64)


def install() -> None:
    """Install both stand-ins where needed."""
    _declare_torchvision_nms()
    install_trees()


NMS_SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


def _declare_torchvision_nms() -> None:
    for name, schema in NMS_SCHEMAS.items():
        try:
            getattr(torch.ops.torchvision, name)  # the extension loaded: nothing to do
        except (AttributeError, RuntimeError):
            torch.library.define(f"torchvision::{name}", schema)


def install_trees() -> bool:
    """Give TorchRL's prioritized sampler the stand-in trees when its extension did not load."""
    from torchrl.data.replay_buffers.samplers import prioritized

    if prioritized.SumSegmentTreeFp32 is not None:
        return False
    prioritized.SumSegmentTreeFp32 = SumTree32
    prioritized.SumSegmentTreeFp64 = SumTree64
    prioritized.MinSegmentTreeFp32 = MinTree32
    prioritized.MinSegmentTreeFp64 = MinTree64
    return True
