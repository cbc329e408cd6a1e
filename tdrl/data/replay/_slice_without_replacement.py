"""Slices of trajectories, each trajectory visited once per epoch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch

from tdrl.errors import CheckpointError

from ._samplers import SamplerWithoutReplacement, check_not_empty
from ._slice import SliceSampler
from ._storages import Storage

__all__ = ["SliceSamplerWithoutReplacement"]


class _Count:
    """A stand-in storage of ``n`` elements: the epoch sampler only asks for its length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class SliceSamplerWithoutReplacement(SliceSampler):
    """Samples slices of trajectories, each trajectory at most once per epoch (TorchRL's rule).

    An epoch is a permutation of the trajectories stored when it starts (all of them, short ones
    included). Each batch takes the next ``num_slices`` trajectories of the permutation and one
    slice of ``slice_len`` steps from each, starting at a uniformly drawn step; a batch never holds
    two slices of one trajectory. The last batch of an epoch has fewer slices unless ``drop_last``,
    which skips the leftover trajectories. With ``strict_length=True`` a trajectory shorter than
    ``slice_len`` still takes its place in the epoch but gives no slice (the batch is smaller; a
    batch of only short trajectories raises). Any write to the buffer starts a new epoch, as
    TorchRL's does when the trajectories change. Iterating over a buffer stops at the end of an
    epoch.

    Trajectories are found, and slices marked (``truncated_key``, ``init_key``), exactly as
    :class:`~tdrl.data.SliceSampler` does.

    Args:
        num_slices: the number of slices per batch (give this or ``slice_len``).
        slice_len: the steps per slice (give this or ``num_slices``).
        drop_last: skip the trajectories left over at the end of an epoch when they cannot fill
            a whole batch.
        end_key, end_keys, traj_key, truncated_key, init_key, strict_length: as for
            :class:`~tdrl.data.SliceSampler`.
        ends, trajectories: TorchRL options tdrl does not have; only ``None`` is accepted.
        shuffle: a random permutation of the trajectories per epoch (``False``: storage order).
        compile, use_gpu: TorchRL's speed options; tdrl computes indices on the CPU, with the
            same results, for any value.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, SliceSamplerWithoutReplacement, TensorDictReplayBuffer
        >>> sampler = SliceSamplerWithoutReplacement(slice_len=2, traj_key="traj")
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), sampler=sampler, batch_size=4)
        >>> _ = rb.extend(TensorDict({"traj": torch.arange(12) // 4}, [12]))  # 3 trajectories
        >>> epoch = [set(batch["traj"].tolist()) for batch in rb]  # 2 slices, then 1
        >>> [len(trajs) for trajs in epoch], sorted(set().union(*epoch)), sampler.ran_out
        ([2, 1], [0, 1, 2], True)
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        drop_last: bool = False,
        end_key: Any = None,
        end_keys: Sequence[Any] | None = None,
        traj_key: Any = None,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        truncated_key: Any = ("next", "truncated"),
        init_key: Any = "is_init",
        strict_length: bool = True,
        shuffle: bool = True,
        compile: bool | dict[str, Any] = False,
        use_gpu: torch.device | bool = False,
    ) -> None:
        super().__init__(
            num_slices=num_slices,
            slice_len=slice_len,
            end_key=end_key,
            end_keys=end_keys,
            traj_key=traj_key,
            ends=ends,
            trajectories=trajectories,
            cache_values=True,
            truncated_key=truncated_key,
            init_key=init_key,
            strict_length=strict_length,
            compile=compile,
            use_gpu=use_gpu,
        )
        self.drop_last, self.shuffle = bool(drop_last), bool(shuffle)
        self._epoch = SamplerWithoutReplacement(drop_last=self.drop_last, shuffle=self.shuffle)
        # (write clock, stored elements, trajectories) of the split the epoch permutes.
        self._epoch_key = (-1, -1, -1)

    @property
    def ran_out(self) -> bool:
        return self._epoch.ran_out

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Takes the next trajectories of the epoch and one random slice from each."""
        name = type(self).__name__
        n = check_not_empty(self, storage)
        num_slices, slice_len = self._shape(batch_size)
        if self._cache is None or self._cache[:2] != (self._clock, n):
            self._cache = (self._clock, n, self._split(storage, n))
        order, starts, lengths = self._cache[2]
        count = starts.numel()
        if self.strict_length and int(lengths.max()) < slice_len:
            raise ValueError(
                f"{name}.sample: no trajectory is long enough (got a longest trajectory of "
                f"{int(lengths.max())} steps; expected at least slice_len={slice_len}). Use "
                "shorter slices, strict_length=False, or add data."
            )
        if self.drop_last and num_slices > count:
            raise ValueError(
                f"{name}.sample: not enough trajectories for one batch with drop_last=True (got "
                f"{count}; expected at least num_slices={num_slices}). Add trajectories, sample "
                "fewer slices or use drop_last=False."
            )
        if self._epoch_key != (self._clock, n, count):
            self._epoch.empty()
            self._epoch_key = (self._clock, n, count)
        traj, _ = self._epoch.sample(cast(Storage, _Count(count)), num_slices, generator)
        if self.strict_length:
            long_enough = lengths[traj] >= slice_len
            if not bool(long_enough.any()):
                raise ValueError(
                    f"{name}.sample: every trajectory of this batch is shorter than slice_len "
                    f"(got lengths {lengths[traj].tolist()}; expected at least {slice_len}). Use "
                    "strict_length=False to sample short trajectories whole."
                )
            traj = traj[long_enough]
        sizes = lengths[traj].clamp(max=slice_len)
        offset = (
            torch.rand(traj.numel(), generator=generator) * (lengths[traj] - sizes + 1)
        ).long()
        rows = (starts[traj] + offset).unsqueeze(1) + torch.arange(slice_len)
        rows = rows[torch.arange(slice_len) < sizes.unsqueeze(1)]
        index = order[rows]
        return index, self._marks(storage, index, sizes)

    def empty(self) -> None:
        super().empty()
        self._epoch.empty()
        self._epoch_key = (-1, -1, -1)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "drop_last": self.drop_last, "shuffle": self.shuffle}

    def state_dict(self) -> dict[str, Any]:
        """The write order (as :class:`~tdrl.data.SliceSampler`) and the trajectory epoch."""
        return {
            **super().state_dict(),
            **self._epoch.state_dict(),
            "epoch_key": list(self._epoch_key),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        key = state.get("epoch_key")
        if not (
            isinstance(key, list)
            and len(key) == 3
            and all(isinstance(k, int) and not isinstance(k, bool) and k >= -1 for k in key)
        ):
            raise CheckpointError(
                f"{type(self).__name__}.load_state_dict: invalid epoch key (got {key!r}; expected "
                "[clock, elements, trajectories] as ints >= -1). The checkpoint is corrupted; "
                "dump again."
            )
        epoch = SamplerWithoutReplacement(drop_last=self.drop_last, shuffle=self.shuffle)
        epoch.load_state_dict(state)
        # The permutation must index the trajectories of the split it was drawn for.
        epoch.check_fits(max(key[2], 0), max(key[2], 0), f"{type(self).__name__}.load_state_dict")
        super().load_state_dict(state)
        self._epoch, self._epoch_key = epoch, (key[0], key[1], key[2])
