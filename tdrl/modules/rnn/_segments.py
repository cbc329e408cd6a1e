"""Packing of ``[N, T]`` sequences into padded segments that each start with a fresh state."""

from __future__ import annotations

import torch

__all__ = ["Segments"]


class Segments:
    """Splits every row of a ``[N, T]`` batch at ``t = 0`` and wherever ``is_init`` is true.

    Each piece becomes one row of a padded ``[S, L]`` batch (``L`` the longest piece), so a
    fused RNN kernel runs once over all of them; padding sits at the end of short pieces and
    never influences real steps. Without resets after ``t = 0`` the packing is the identity and
    costs nothing.

    Args:
        is_init: ``[N, T]`` boolean episode-start flags, or ``None`` (no resets).
        n: number of rows ``N``.
        t: sequence length ``T``.
    """

    def __init__(self, is_init: torch.Tensor | None, n: int, t: int) -> None:
        self.n, self.t = n, t
        self.reset_at_start: torch.Tensor | None = None
        self._dest: torch.Tensor | None = None
        self._starts: torch.Tensor | None = None
        self._keep: torch.Tensor | None = None
        if is_init is None:
            self.s, self.length = n, t
            return
        if t == 1 or not bool(is_init[:, 1:].any()):
            self.s, self.length = n, t
            self.reset_at_start = is_init[:, 0]
            return
        starts = is_init.clone()
        starts[:, 0] = True
        flat = starts.reshape(-1)
        start_index = flat.nonzero().squeeze(-1)
        segment = flat.long().cumsum(0) - 1
        position = torch.arange(n * t, device=flat.device) - start_index[segment]
        self.s = start_index.numel()
        self.length = int(position.max()) + 1
        self._dest = segment * self.length + position
        self._starts = start_index
        self.reset_at_start = is_init.reshape(-1).index_select(0, start_index)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, T, *F] -> [S, L, *F]``."""
        if self._dest is None:
            return x
        feat = x.shape[2:]
        out = x.new_zeros((self.s * self.length, *feat))
        out.index_copy_(0, self._dest, x.reshape(self.n * self.t, *feat))
        return out.view(self.s, self.length, *feat)

    def unpack(self, y: torch.Tensor) -> torch.Tensor:
        """``[S, L, *F] -> [N, T, *F]``."""
        if self._dest is None:
            return y
        feat = y.shape[2:]
        flat = y.reshape(self.s * self.length, *feat).index_select(0, self._dest)
        return flat.view(self.n, self.t, *feat)

    def initial(self, state: torch.Tensor) -> torch.Tensor:
        """The state at the start of each piece, zeroed where it starts an episode:
        ``[N, T, *F] -> [S, *F]``."""
        if self._starts is None:
            first = state[:, 0]
        else:
            first = state.reshape(self.n * self.t, *state.shape[2:]).index_select(0, self._starts)
        if self.reset_at_start is None:
            return first
        if self._keep is None or self._keep.dtype != first.dtype:
            # A multiply is several times cheaper than masked_fill at step-mode sizes.
            self._keep = (~self.reset_at_start).to(first.dtype)
        return first * self._keep.view(-1, *([1] * (first.ndim - 1)))
