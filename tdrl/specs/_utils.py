"""Small private helpers shared by the spec classes (shapes, devices, masks, segments)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tdrl.errors import SpecError

ShapeLike = int | Sequence[int] | torch.Size
DeviceLike = torch.device | str | int | None


def as_shape(shape: ShapeLike | None) -> torch.Size:
    """Turns an int, a sequence of ints or a ``torch.Size`` into a ``torch.Size``."""
    if shape is None:
        return torch.Size(())
    if isinstance(shape, torch.Size):
        return shape
    if isinstance(shape, int):
        return torch.Size((shape,))
    return torch.Size(tuple(int(s) for s in shape))


def shape_from_args(shape: tuple[Any, ...]) -> torch.Size:
    """Reads ``f(2, 3)`` and ``f((2, 3))`` / ``f(torch.Size([2, 3]))`` alike."""
    if len(shape) == 1 and not isinstance(shape[0], int):
        return as_shape(shape[0])
    return as_shape(shape)


def as_device(device: DeviceLike) -> torch.device | None:
    """Turns a device-like into a ``torch.device`` (``None`` stays ``None``)."""
    if device is None:
        return None
    return torch.device(device)


def leaf_device(device: DeviceLike) -> torch.device:
    """Leaves always live on a device; ``None`` means CPU."""
    return torch.device("cpu") if device is None else torch.device(device)


def norm_dim(dim: int, ndim: int, where: str) -> int:
    """Normalises a possibly negative ``dim`` against ``ndim`` dims, raising ``IndexError``."""
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"{where}: dimension out of range (got {dim}; expected within [{-ndim}, {ndim - 1}])."
            " Pass a valid dimension."
        )
    return dim % ndim


def expand_ellipsis(idx: Any, ndim: int) -> Any:
    """Replaces an ``Ellipsis`` by full slices so the index only touches the leading ``ndim`` dims."""
    if idx is Ellipsis:
        return ()
    if not isinstance(idx, tuple) or not any(i is Ellipsis for i in idx):
        return idx
    used = sum(1 for i in idx if i is not None and i is not Ellipsis)
    out: list[Any] = []
    for i in idx:
        if i is Ellipsis:
            out.extend([slice(None)] * max(ndim - used, 0))
        else:
            out.append(i)
    return tuple(out)


def index_shape(shape: torch.Size, idx: Any, device: torch.device | None, where: str) -> torch.Size:
    """Shape of ``x[idx]`` for ``x`` of ``shape``, computed on a zero-stride dummy (no data pass)."""
    dummy = torch.zeros((), device=device).expand(shape)
    try:
        return dummy[idx].shape
    except IndexError as err:
        raise IndexError(
            f"{where}: index {idx!r} does not fit the indexable dims (got {err}; expected an index"
            f" over the dims {tuple(shape)}). Index the batch dims only."
        ) from err


def sample_allowed(allowed: torch.Tensor, where: str) -> torch.Tensor:
    """Draws one index per row of ``allowed[..., n]`` uniformly among the True entries.

    Argmax of i.i.d. uniforms restricted to the allowed entries is a uniform pick, and it is
    fully vectorised (no loop over rows).
    """
    scores = torch.rand(allowed.shape, device=allowed.device)
    scores.masked_fill_(~allowed, -1.0)
    values, index = scores.max(-1)
    if values.numel() and bool((values < 0).any()):
        raise ValueError(
            f"{where}: a mask row allows no value (got a row that is all False; expected at least"
            " one True per row). Fix the mask passed to update_mask."
        )
    return index


def nearest_allowed(x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """For each entry of integer ``x[...]``, the closest index whose ``allowed[..., i]`` is True."""
    n = allowed.shape[-1]
    grid = torch.arange(n, device=allowed.device)
    dist = (grid - x.unsqueeze(-1)).abs().to(torch.float32)
    dist = dist.masked_fill(~allowed, float("inf"))
    return dist.argmin(-1)


def to_index(x: torch.Tensor) -> torch.Tensor:
    """Rounds a float tensor to int64 indices (integers are only cast)."""
    if x.is_floating_point():
        x = x.round()
    return x.to(torch.int64)


class SegmentLayout:
    """Maps a flat ``[..., sum(nvec)]`` layout to a padded ``[..., len(nvec), max(nvec)]`` one.

    MultiCategorical and MultiOneHot use it to treat every sub-action as a row of a padded
    matrix, so sampling, checks and projections are single vectorised ops.
    """

    def __init__(self, nvec: tuple[int, ...], device: torch.device) -> None:
        self.nvec = nvec
        self.k = len(nvec)
        self.max_n = max(nvec)
        positions = [i * self.max_n + j for i, n in enumerate(nvec) for j in range(n)]
        self.pad_index = torch.tensor(positions, dtype=torch.int64, device=device)
        offsets = [0]
        for n in nvec[:-1]:
            offsets.append(offsets[-1] + n)
        self.offsets = torch.tensor(offsets, dtype=torch.int64, device=device)
        self.nvec_t = torch.tensor(nvec, dtype=torch.int64, device=device)
        self.valid = self.to_padded(torch.ones(sum(nvec), dtype=torch.bool, device=device), False)

    def to_padded(self, flat: torch.Tensor, fill: Any) -> torch.Tensor:
        """``[..., sum(nvec)]`` -> ``[..., k, max_n]``, padding with ``fill``."""
        lead = flat.shape[:-1]
        out = flat.new_full((*lead, self.k * self.max_n), fill)
        out.index_copy_(-1, self.pad_index, flat)
        return out.view(*lead, self.k, self.max_n)

    def from_padded(self, padded: torch.Tensor) -> torch.Tensor:
        """``[..., k, max_n]`` -> ``[..., sum(nvec)]``."""
        return padded.flatten(-2).index_select(-1, self.pad_index)


def refuse_register(owner: str, use_register: bool) -> None:
    """TorchRL's ``use_register`` (a lookup table of encoded values) is not supported."""
    if use_register:
        raise ValueError(
            f"{owner}.__init__: use_register=True is not supported (got True; expected False): "
            "tdrl encodes values without a register. Drop the argument."
        )


def read_indices(
    val: Any, limits: torch.Tensor | int, device: torch.device | None, where: str
) -> torch.Tensor:
    """Categorical indices from a tensor, numpy array, list or scalar (``encode`` of one-hot
    specs): int64, on ``device`` (``None``: where they are), each in ``[0, limits)``.

    Raises:
        SpecError: a value is not an integer in range (``where`` names the method).

    Examples:
        >>> read_indices([0, 2], 3, None, "OneHot.encode").tolist()
        [0, 2]
    """
    t = val if isinstance(val, torch.Tensor) else torch.as_tensor(np.asarray(val))
    if device is not None:
        t = t.to(device)
    if t.dtype.is_floating_point and not bool((t == t.round()).all()):
        raise SpecError(
            f"{where}: the values are not categorical indices (got {t.flatten()[:8].tolist()};"
            " expected integers). Encode indices (a one-hot value needs no encoding)."
        )
    idx = t.to(torch.int64)
    bound = limits.to(idx.device) if isinstance(limits, torch.Tensor) else limits
    if bool(((idx < 0) | (idx >= bound)).any()):
        high = limits if isinstance(limits, int) else limits.tolist()
        raise SpecError(
            f"{where}: an index is out of range (got {idx.flatten()[:8].tolist()}; expected"
            f" indices in [0, {high})). Encode indices of the spec's categories."
        )
    return idx
