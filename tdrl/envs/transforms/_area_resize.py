"""Area-weighted image shrinking, value for value as OpenCV's ``INTER_AREA``.

``F.interpolate(mode="area")`` is an adaptive average pool: for a ratio that is not an integer
its windows snap to whole pixels, so it is not the area average that OpenCV (and hence
gymnasium's ``AtariPreprocessing``, 210x160 -> 84x84) computes. Here every output pixel is the
average of the input pixels its cell covers, weighted by the covered fraction, with OpenCV's
tap table (float32 weights, overlaps under 1e-3 dropped) and its order of float32 sums (each
row first, then the rows), so uint8 results match OpenCV's exactly.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

__all__ = ["area_shrink"]


@lru_cache(maxsize=32)
def _taps(size_in: int, size_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index, weight)`` of shape ``[K, size_out]``: tap ``k`` of output ``d`` reads input
    ``index[k, d]`` with ``weight[k, d]`` (unused taps have weight 0)."""
    scale = 1.0 / (size_out / size_in)  # OpenCV's double-precision scale
    table: list[list[tuple[int, float]]] = []
    for d in range(size_out):
        lo = d * scale
        hi = lo + scale
        cell = min(scale, size_in - lo)
        first, last = math.ceil(lo), min(math.floor(hi), size_in - 1)
        first = min(first, last)
        taps = []
        if first - lo > 1e-3:
            taps.append((first - 1, (first - lo) / cell))
        taps.extend((s, 1.0 / cell) for s in range(first, last))
        if hi - last > 1e-3:
            taps.append((last, min(hi - last, 1.0, cell) / cell))
        table.append(taps)
    k = max(len(t) for t in table)
    index = torch.zeros(k, size_out, dtype=torch.long)
    weight = torch.zeros(k, size_out, dtype=torch.float32)
    for d, taps in enumerate(table):
        for j, (s, w) in enumerate(taps):
            index[j, d] = s
            weight[j, d] = float(np.float32(w))
    return index, weight


def _sum_taps(x: torch.Tensor, dim: int, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    shape = [1] * x.ndim
    shape[dim] = weight.shape[1]
    index, weight = index.to(x.device), weight.to(x.device)
    out = x.index_select(dim, index[0]) * weight[0].reshape(shape)
    for j in range(1, index.shape[0]):  # in OpenCV's order, one float32 sum at a time
        out = out + x.index_select(dim, index[j]) * weight[j].reshape(shape)
    return out


def area_shrink(value: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Shrinks ``[..., H, W]`` images to ``[..., rows, cols]`` by area averaging.

    Integer images are rounded (half to even, as OpenCV) and clamped back to their dtype.
    ``rows <= H`` and ``cols <= W`` (the caller checks).

    Examples:
        >>> import torch
        >>> img = torch.tensor([[0, 10, 20, 30], [40, 50, 60, 70]], dtype=torch.uint8)
        >>> area_shrink(img, 1, 2).tolist()
        [[25, 45]]
    """
    x = value if value.dtype.is_floating_point else value.float()
    out = _sum_taps(x, -1, *_taps(value.shape[-1], cols))
    out = _sum_taps(out, -2, *_taps(value.shape[-2], rows))
    if value.dtype.is_floating_point:
        return out.to(value.dtype)
    info = torch.iinfo(value.dtype)
    return out.round().clamp(info.min, info.max).to(value.dtype)
