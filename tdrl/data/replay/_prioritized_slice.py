"""Slices of trajectories whose start steps are drawn by priority."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._prioritized import PrioritizedSampler
from ._samplers import check_not_empty
from ._slice import SliceSampler
from ._storages import Storage

__all__ = ["PrioritizedSliceSampler"]


class PrioritizedSliceSampler(SliceSampler, PrioritizedSampler):
    """Samples slices of trajectories whose first step is drawn by priority (TorchRL's rule).

    Every stored step has a priority, as with :class:`~tdrl.data.PrioritizedSampler`. A slice
    starts at a step drawn with probability proportional to its weight ``(p + eps) ** alpha``
    among the steps a slice can start at, and runs forward ``slice_len`` steps inside the
    trajectory: with ``strict_length=True`` the last ``slice_len - 1`` steps of a trajectory
    cannot start a slice (slices never cross a trajectory end); with ``strict_length=False`` the
    first step of a trajectory always can, and a slice that would cross the end is cut there.
    Trajectories are found as :class:`~tdrl.data.SliceSampler` finds them (write order kept, so
    trajectories that wrap around the ring buffer stay whole).

    ``"priority_weight"`` holds the importance weight of each slice's start step,
    ``(w_start / w_min) ** (-beta)`` with ``w_min`` the smallest weight stored, repeated over
    the steps of the slice. :meth:`update_priority` sets per-step priorities (the sample's
    ``"index"`` entries), so ``TensorDictReplayBuffer.update_tensordict_priority`` works as for
    :class:`~tdrl.data.PrioritizedSampler`. Slices are marked (``truncated_key``, ``init_key``)
    as :class:`~tdrl.data.SliceSampler` marks them.

    Args:
        max_capacity, alpha, beta, eps, dtype, reduction, max_priority_within_buffer: as for
            :class:`~tdrl.data.PrioritizedSampler`.
        num_slices, slice_len, end_key, end_keys, traj_key, ends, trajectories, cache_values,
            truncated_key, init_key, strict_length, compile, span: as for
            :class:`~tdrl.data.SliceSampler`.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, PrioritizedSliceSampler, TensorDictReplayBuffer
        >>> sampler = PrioritizedSliceSampler(20, alpha=1.0, beta=1.0, slice_len=3, traj_key="traj")
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=sampler, batch_size=6)
        >>> index = rb.extend(TensorDict({"traj": torch.arange(16) // 8, "t": torch.arange(16) % 8}, [16]))
        >>> priority = torch.zeros(16)
        >>> priority[2] = 1.0  # only step 2 of trajectory 0 can start a slice
        >>> sampler.update_priority(index, priority)
        >>> rb.sample()["t"].tolist()
        [2, 3, 4, 2, 3, 4]
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float32,
        reduction: str = "max",
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: Any = None,
        end_keys: Sequence[Any] | None = None,
        traj_key: Any = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: Any = ("next", "truncated"),
        init_key: Any = "is_init",
        strict_length: bool = True,
        compile: bool | dict[str, Any] = False,
        span: bool | int | tuple[bool | int, bool | int] = False,
        max_priority_within_buffer: bool = False,
    ) -> None:
        SliceSampler.__init__(
            self,
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=cache_values,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            compile=compile,
            span=span,
        )
        PrioritizedSampler.__init__(
            self,
            max_capacity,
            alpha,
            beta,
            eps=eps,
            dtype=dtype,
            reduction=reduction,
            max_priority_within_buffer=max_priority_within_buffer,
        )
        self._anchors: tuple[int, int, int, tuple[torch.Tensor, ...]] | None = None

    def check_storage(self, storage: Storage) -> None:
        SliceSampler.check_storage(self, storage)
        PrioritizedSampler.check_storage(self, storage)

    def add(self, storage: Storage, index: torch.Tensor) -> None:
        """Gives the new steps the largest priority seen and records their write order."""
        PrioritizedSampler.add(self, storage, index)
        SliceSampler.add(self, storage, index)

    def _starts(self, storage: Storage, n: int, slice_len: int) -> tuple[torch.Tensor, ...]:
        """``(order, trajectory start, trajectory length, position in order of every element,
        trajectory of every order position, elements that cannot start a slice)``."""
        if self._cache is None or self._cache[:2] != (self._clock, n):
            self._cache = (self._clock, n, self._split(storage, n))
        key = (self._clock, n, slice_len)
        if self._anchors is None or self._anchors[:3] != key:
            order, starts, lengths = self._cache[2]
            traj_of = torch.repeat_interleave(torch.arange(starts.numel()), lengths)
            offset = torch.arange(n) - starts[traj_of]
            last_start = lengths[traj_of] - slice_len
            if not self.strict_length:
                last_start = last_start.clamp(min=0)
            position = torch.empty(n, dtype=torch.long)
            position[order] = torch.arange(n)
            blocked = order[offset > last_start]
            self._anchors = (*key, (order, starts, lengths, position, traj_of, blocked))
        return self._anchors[3]

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Draws slice starts by priority among the steps a slice can start at."""
        name = type(self).__name__
        n = check_not_empty(self, storage)
        num_slices, slice_len = self._shape(batch_size)
        order, starts, lengths, position, traj_of, blocked = self._starts(storage, n, slice_len)
        if blocked.numel() == n:
            raise ValueError(
                f"{name}.sample: no trajectory is long enough (got a longest trajectory of "
                f"{int(lengths.max())} steps; expected at least slice_len={slice_len}). Use "
                "shorter slices, strict_length=False, or add data."
            )
        # The steps that cannot start a slice weigh nothing while the starts are drawn.
        kept = self._sum.leaves.index_select(0, blocked)
        self._sum.update(blocked, torch.zeros_like(kept))
        try:
            if not self._sum.total() > 0:
                raise ValueError(
                    f"{name}.sample: no step that can start a slice has a positive weight (got "
                    "a total weight of 0; expected > 0). Give some valid start a priority > 0 "
                    "or use eps > 0."
                )
            anchor, info = PrioritizedSampler.sample(self, storage, num_slices, generator)
        finally:
            self._sum.update(blocked, kept)
        first = position[anchor]
        traj = traj_of[first]
        sizes = (starts[traj] + lengths[traj] - first).clamp(max=slice_len)
        rows = first.unsqueeze(1) + torch.arange(slice_len)
        rows = rows[torch.arange(slice_len) < sizes.unsqueeze(1)]
        index = order[rows]
        weight = torch.repeat_interleave(info["priority_weight"], sizes)
        return index, {"priority_weight": weight, **self._marks(storage, index, sizes)}

    def share_problem(self) -> str | None:
        return PrioritizedSampler.share_problem(self)

    def empty(self) -> None:
        SliceSampler.empty(self)
        PrioritizedSampler.empty(self)
        self._anchors = None

    def config(self) -> dict[str, Any]:
        return {**PrioritizedSampler.config(self), **SliceSampler.config(self)}

    def state_dict(self) -> dict[str, Any]:
        """The priority trees (as :class:`~tdrl.data.PrioritizedSampler`) and the write order
        (as :class:`~tdrl.data.SliceSampler`)."""
        return {**PrioritizedSampler.state_dict(self), **SliceSampler.state_dict(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        PrioritizedSampler.load_state_dict(self, state)
        SliceSampler.load_state_dict(self, state)
        self._anchors = None

    def check_fits(self, length: int, slots: int, where: str) -> None:
        PrioritizedSampler.check_fits(self, length, slots, where)
        SliceSampler.check_fits(self, length, slots, where)
