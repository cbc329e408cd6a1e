"""Sampling slices of consecutive steps from stored trajectories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tdrl.errors import CheckpointError

from ._refuse import refuse_unsupported
from ._samplers import Sampler, check_not_empty
from ._storages import Storage

__all__ = ["SliceSampler"]


#: the trajectory-id entries a SliceSampler built without keys looks for, in order (TorchRL's).
_AUTO_TRAJ_KEYS: tuple[Any, ...] = (("collector", "traj_ids"), "episode")


def _stable_order(order: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Re-sorts ``order`` by ``key[order]``, keeping the previous order on ties."""
    return order[torch.sort(key[order], stable=True).indices]


def _key_list(key: Any) -> Any:
    return list(key) if isinstance(key, tuple) else key


def _leaf(storage: Storage, key: Any, index: torch.Tensor | None = None) -> torch.Tensor | None:
    """Stored entry ``key`` (at ``index``, when given), or ``None`` if the storage lacks it."""
    try:
        leaf = storage.get_leaf(key)
    except KeyError:
        return None
    return leaf if index is None else leaf[index.to(leaf.device)]


class SliceSampler(Sampler):
    """Samples ``num_slices`` slices of ``slice_len`` consecutive steps, each inside one trajectory.

    Trajectories are told apart either by a trajectory-id entry (``traj_key``) or by an end-of-
    trajectory flag (``end_key``, default ``("next", "done")``: a step with the flag set is the
    last of its trajectory). Given neither, the first sample looks for a trajectory-id entry in
    the storage, ``("collector", "traj_ids")`` (what collectors write) then ``"episode"``, and
    records the one found in :attr:`traj_key` (``end_key`` otherwise), as TorchRL. Steps are put
    back in the order they were written, so trajectories that wrap around the ring buffer stay
    whole.

    Each slice comes from a trajectory drawn uniformly (among those at least ``slice_len`` long
    with ``strict_length``) and starts at a step drawn uniformly inside it, as in TorchRL (seeded
    samples equal TorchRL's as long as no trajectory wraps around the ring buffer).

    Batched environments interleave trajectories. With an ``ndim=2`` (``[env, time]``) storage
    every env is its own stream and either key works. With data flattened into an ``ndim=1``
    storage, use ``traj_key`` (ids must differ between envs); ``end_key`` then requires every
    trajectory to be stored contiguously.

    The batch holds ``batch_size = num_slices * slice_len`` elements, slice after slice:
    ``sample.reshape(num_slices, slice_len)`` recovers the slices. With ``strict_length=False``,
    trajectories shorter than ``slice_len`` are sampled whole and the batch may be smaller.

    As in TorchRL, the info of a sample (set into TensorDict samples) marks where slices break:
    ``truncated_key`` is ``True`` at the last step of every slice, the ``"done"`` entry next to
    it is the stored flag OR that mark, the ``"terminated"`` entry is the stored one (``False``
    when absent); with ``init_key`` present in the storage, its flag is also set at the first
    step of every slice (recurrent modules restart there).

    Args:
        num_slices: the number of slices per batch (give this or ``slice_len``).
        slice_len: the steps per slice (give this or ``num_slices``).
        end_key: the end-of-trajectory flag entry (default ``("next", "done")``).
        end_keys: several flag entries OR-ed together (instead of ``end_key``); entries missing
            from the storage are skipped, at least one must be present.
        traj_key: the trajectory-id entry (instead of ``end_key``); found in the storage when
            neither key is given (see above).
        step_key: TorchRL's step entry, read only with ``fragmented=True``.
        fragmented, ends, trajectories, pad_output, span: TorchRL options tdrl does not have;
            only their defaults are accepted.
        cache_values: accepted for TorchRL code. tdrl always caches the trajectory boundaries
            between samples and recomputes them after every write, which is what TorchRL's
            ``cache_values=True`` does; ``False`` changes nothing observable either.
        truncated_key: where the slice-end mark goes (``None``: no truncated/done/terminated
            entries).
        init_key: the first-step flag OR-ed with slice starts (``None``: left untouched).
        strict_length: only sample full-length slices.
        compile, use_gpu: TorchRL's speed options for computing indices; tdrl computes them
            on the CPU, with the same results, for any value.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=3, traj_key="traj"), batch_size=6)
        >>> traj = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])  # two interleaved trajectories
        >>> _ = rb.extend(TensorDict({"traj": traj, "t": torch.arange(8) // 2}, [8]))
        >>> s = rb.sample().reshape(2, 3)
        >>> bool((s["traj"] == s["traj"][:, :1]).all()), bool((s["t"].diff(dim=1) == 1).all())
        (True, True)
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        end_key: Any = None,
        end_keys: Sequence[Any] | None = None,
        traj_key: Any = None,
        step_key: Any = "step_count",
        fragmented: bool = False,
        ends: torch.Tensor | None = None,
        trajectories: torch.Tensor | None = None,
        cache_values: bool = False,
        truncated_key: Any = ("next", "truncated"),
        init_key: Any = "is_init",
        strict_length: bool = True,
        pad_output: bool = False,
        compile: bool | dict[str, Any] = False,
        span: bool | int | tuple[bool | int, bool | int] = False,
        use_gpu: torch.device | bool = False,
    ) -> None:
        refuse_unsupported(
            f"{type(self).__name__}.__init__",
            fragmented=(fragmented, False),
            ends=(ends, None),
            trajectories=(trajectories, None),
            pad_output=(pad_output, False),
            span=(span, False),
        )
        if end_key is not None and end_keys is not None:
            raise ValueError(
                f"SliceSampler.__init__: end_key and end_keys are exclusive (got end_key="
                f"{end_key!r}, end_keys={end_keys!r}). Put every flag in end_keys."
            )
        if end_keys is not None:
            end_keys = tuple(end_keys)
            if not end_keys:
                raise ValueError(
                    "SliceSampler.__init__: end_keys is empty (got []; expected at least one "
                    "key). Pass the end-of-trajectory flags."
                )
            end_key = end_keys[0]
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                f"SliceSampler.__init__: give exactly one of num_slices and slice_len (got num_slices="
                f"{num_slices!r}, slice_len={slice_len!r}). The batch size sets the other."
            )
        if any(
            v is not None and (not isinstance(v, int) or v < 1) for v in (num_slices, slice_len)
        ):
            raise ValueError(
                f"SliceSampler.__init__: invalid slice count or length (got num_slices={num_slices!r}, "
                f"slice_len={slice_len!r}; expected an int >= 1). Fix the argument."
            )
        if end_key is not None and traj_key is not None:
            raise ValueError(
                f"SliceSampler.__init__: give end_key or traj_key, not both (got end_key={end_key!r}, "
                f"traj_key={traj_key!r}). Keep the one that marks trajectories."
            )
        self.num_slices, self.slice_len = num_slices, slice_len
        self.traj_key = traj_key
        self._given_traj_key = traj_key
        # Neither key given: as TorchRL, the first sample looks for a trajectory-id entry in
        # the storage (("collector", "traj_ids"), then "episode") and records it in traj_key;
        # without one, end_key marks the trajectories.
        self._auto_keys = self._traj_key_auto = traj_key is None and end_key is None
        # As TorchRL, end_key keeps its default next to a traj_key (the trajectory ids rule).
        self.end_key = ("next", "done") if end_key is None else end_key
        self._config_end_key = ("next", "done") if end_key is None and traj_key is None else end_key
        self.end_keys = end_keys if traj_key is None else None
        self.step_key = step_key
        self.truncated_key = truncated_key
        self.init_key = init_key
        self.compile, self.use_gpu = compile, use_gpu
        self.strict_length = strict_length
        self.cache_values = bool(cache_values)
        self._stamp = torch.empty(0, dtype=torch.long)
        self._clock = 0
        self._cache: tuple[int, int, tuple[torch.Tensor, ...]] | None = None

    def check_storage(self, storage: Storage) -> None:
        if not storage.bounded:
            raise ValueError(
                "SliceSampler.check_storage: the storage has no size limit (got "
                "ListStorage(None); expected a max_size). Give the storage a max_size."
            )

    def add(self, storage: Storage, index: torch.Tensor) -> None:
        """Records the write order of the elements at ``index`` (shape ``[*env, time]``)."""
        if self._stamp.numel() != storage.capacity:
            stamp = torch.full((storage.capacity,), -1, dtype=torch.long)
            stamp[: self._stamp.numel()] = self._stamp[: storage.capacity]
            self._stamp = stamp
        steps = index.shape[-1] if index.dim() else 1
        stamps = (self._clock + torch.arange(steps)).expand(index.shape)
        self._stamp[index.reshape(-1)] = stamps.reshape(-1)
        self._clock += steps

    def _split(self, storage: Storage, n: int) -> tuple[torch.Tensor, ...]:
        """Returns ``(order, starts, lengths)``: storage positions grouped by trajectory in time
        order, and where each trajectory starts in ``order`` and how long it is."""
        if self._traj_key_auto:
            self._resolve_traj_key(storage)
        order = torch.sort(self._stamp[:n], stable=True).indices
        stream = torch.arange(n) % storage.env_numel
        if self.traj_key is not None:
            traj = storage.get_leaf(self.traj_key).reshape(n, -1)[:, 0].to("cpu", torch.long)
            order = _stable_order(_stable_order(order, traj), stream)
            new = torch.ones(n, dtype=torch.bool)
            new[1:] = (traj[order][1:] != traj[order][:-1]) | (
                stream[order][1:] != stream[order][:-1]
            )
        else:
            end = self._ends(storage, n)
            order = _stable_order(order, stream)
            new = torch.ones(n, dtype=torch.bool)
            new[1:] = end[order][:-1] | (stream[order][1:] != stream[order][:-1])
        starts = new.nonzero().squeeze(1)
        lengths = torch.diff(starts, append=torch.tensor([n]))
        return order, starts, lengths

    def _resolve_traj_key(self, storage: Storage) -> None:
        """Records the trajectory-id entry the storage holds (TorchRL's search order)."""
        self._traj_key_auto = False
        for key in _AUTO_TRAJ_KEYS:
            if _leaf(storage, key) is not None:
                self.traj_key, self.end_keys = key, None
                return

    def _ends(self, storage: Storage, n: int) -> torch.Tensor:
        """The end-of-trajectory flag of every stored element (``end_keys`` OR-ed)."""
        keys = self.end_keys if self.end_keys is not None else (self.end_key,)
        flags = [f for f in (_leaf(storage, key) for key in keys) if f is not None]
        if not flags:
            raise KeyError(
                f"SliceSampler.sample: no end-of-trajectory entry in the storage (got none of "
                f"{list(keys)}; expected at least one). Store the flag or pass traj_key."
            )
        return torch.stack([f.reshape(n, -1).any(1).to("cpu") for f in flags]).any(0)

    def _marks(
        self, storage: Storage, index: torch.Tensor, lengths: torch.Tensor
    ) -> dict[Any, torch.Tensor]:
        """TorchRL's sample info: slice ends (truncated, done, terminated) and slice starts."""
        info: dict[Any, torch.Tensor] = {}
        last = lengths.cumsum(0) - 1
        if self.truncated_key is not None:
            key = (
                self.truncated_key
                if isinstance(self.truncated_key, tuple)
                else (self.truncated_key,)
            )
            truncated = torch.zeros(index.numel(), 1, dtype=torch.bool)
            truncated[last] = True
            done = _leaf(storage, (*key[:-1], "done"), index)
            if done is None:
                done = truncated.clone()
            else:
                done = done.bool() | truncated.view(-1, *(1,) * (done.dim() - 1)).to(done.device)
            terminated = _leaf(storage, (*key[:-1], "terminated"), index)
            info[self.truncated_key] = truncated
            info[(*key[:-1], "done") if len(key) > 1 else "done"] = done
            info[(*key[:-1], "terminated") if len(key) > 1 else "terminated"] = (
                terminated if terminated is not None else torch.zeros_like(truncated)
            )
        if self.init_key is not None:
            stored = _leaf(storage, self.init_key, index)
            if stored is not None:
                start = torch.zeros(index.numel(), dtype=torch.bool)
                start[last - lengths + 1] = True
                mark = start.view(-1, *(1,) * (stored.dim() - 1)).to(stored.device)
                info[self.init_key] = stored.bool() | mark
        return info

    def _shape(self, batch_size: int) -> tuple[int, int]:
        per = self.slice_len if self.slice_len is not None else self.num_slices
        assert per is not None
        if batch_size % per:
            raise ValueError(
                f"SliceSampler.sample: batch_size is not a multiple of "
                f"{'slice_len' if self.slice_len else 'num_slices'} (got {batch_size}; expected a "
                f"multiple of {per}). Change the batch size."
            )
        return (batch_size // per, per) if self.slice_len is not None else (per, batch_size // per)

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Draws a trajectory uniformly (among those long enough with ``strict_length``), then
        a start uniformly inside it, as TorchRL."""
        n = check_not_empty(self, storage)
        num_slices, slice_len = self._shape(batch_size)
        if self._cache is None or self._cache[:2] != (self._clock, n):
            self._cache = (self._clock, n, self._split(storage, n))
        order, starts, lengths = self._cache[2]
        # As TorchRL: a trajectory drawn uniformly (among those long enough when
        # strict_length), then a start drawn uniformly inside it.
        eligible = (lengths >= slice_len).nonzero().squeeze(1) if self.strict_length else None
        if eligible is not None and not eligible.numel():
            raise ValueError(
                f"SliceSampler.sample: no trajectory is long enough (got a longest trajectory of "
                f"{int(lengths.max())} steps; expected at least slice_len={slice_len}). Use shorter "
                "slices, strict_length=False, or add data."
            )
        count = lengths.numel() if eligible is None else eligible.numel()
        traj = torch.randint(count, (num_slices,), generator=generator)
        if eligible is not None:
            traj = eligible[traj]
        sizes = lengths[traj].clamp(max=slice_len)
        offset = (
            (
                torch.rand(num_slices, dtype=torch.float32, generator=generator)
                * (lengths[traj] - sizes + 1)
            )
            .floor()
            .long()
        )
        rows = (starts[traj] + offset).unsqueeze(1) + torch.arange(slice_len)
        rows = rows[torch.arange(slice_len) < sizes.unsqueeze(1)]
        index = order[rows]
        return index, self._marks(storage, index, sizes)

    def empty(self) -> None:
        if self._stamp.is_shared():  # a shared buffer: other processes map this memory
            self._stamp.fill_(-1)
        else:
            self._stamp = torch.empty(0, dtype=torch.long)
        self._clock, self._cache = 0, None

    #: the write clock is shared by the processes of a shared buffer (the stamps are in
    #: shared memory, see :meth:`share_memory_`).
    shared_ints = ("_clock",)

    def share_memory_(self) -> None:
        """Moves the write-order stamps into shared memory (a shared buffer calls it)."""
        self._stamp.share_memory_()

    def config(self) -> dict[str, Any]:
        return {
            "class": type(self).__name__,
            "num_slices": self.num_slices,
            "slice_len": self.slice_len,
            "end_key": _key_list(self._config_end_key),
            "traj_key": _key_list(self._given_traj_key),
            "strict_length": self.strict_length,
            **({"end_keys": [_key_list(k) for k in self.end_keys]} if self.end_keys else {}),
        }

    def state_dict(self) -> dict[str, Any]:
        """The write-order stamp of every element, the write clock, and the trajectory key
        found by a sampler built without one (``None`` until its first sample)."""
        state: dict[str, Any] = {"stamp": self._stamp, "clock": self._clock}
        if self._auto_keys:
            state["traj_key_resolved"] = not self._traj_key_auto
            state["found_traj_key"] = _key_list(self.traj_key)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        stamp, clock = state.get("stamp"), state.get("clock")
        if not (
            isinstance(stamp, torch.Tensor)
            and stamp.dtype == torch.long
            and stamp.dim() == 1
            and isinstance(clock, int)
        ):
            raise CheckpointError(
                "SliceSampler.load_state_dict: invalid write-order state (got stamp="
                f"{type(stamp).__name__}, clock={clock!r}; expected a 1-D int64 tensor and an "
                "int). The checkpoint is corrupted; dump again."
            )
        self._load_found_traj_key(state)
        if self._stamp.is_shared() and self._stamp.shape == stamp.shape:
            self._stamp.copy_(stamp)  # a shared buffer: keep the memory other processes map
        else:
            self._stamp = stamp.clone()
        self._clock, self._cache = clock, None

    def _load_found_traj_key(self, state: dict[str, Any]) -> None:
        if not self._auto_keys:
            return
        resolved, found = state.get("traj_key_resolved", False), state.get("found_traj_key")
        if isinstance(found, list):
            found = tuple(found)
        if not isinstance(resolved, bool) or (
            found is not None and (found not in _AUTO_TRAJ_KEYS or not resolved)
        ):
            raise CheckpointError(
                f"{type(self).__name__}.load_state_dict: invalid trajectory key (got "
                f"traj_key_resolved={resolved!r}, found_traj_key={found!r}; expected a bool and "
                f"None or one of {list(_AUTO_TRAJ_KEYS)}). The checkpoint is corrupted; dump "
                "again."
            )
        self.traj_key, self._traj_key_auto = found, not resolved

    def check_fits(self, length: int, slots: int, where: str) -> None:
        stamps = self._stamp[:length]
        if length and (
            self._stamp.numel() < length
            or int(stamps.min()) < 0
            or int(stamps.max()) >= self._clock
        ):
            raise CheckpointError(
                f"{where}: the slice sampler's write order does not cover the storage (got "
                f"{self._stamp.numel()} stamps for {length} elements, clock {self._clock}; "
                "expected a stamp in [0, clock) for every stored element). The checkpoint is "
                "corrupted; dump again."
            )
