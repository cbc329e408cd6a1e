"""``trajs_per_batch``: batches of whole trajectories reassembled from fixed-frame batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.collectors._traj_ids import TRAJ_KEY

__all__ = ["TRAJ_FORMATS", "TrajectoryAssembler", "check_trajectory_args", "iterate_trajectories"]

TRAJ_FORMATS = ("padded", "cat")
_DONE_KEYS = (("next", "done"), ("next", "truncated"), ("next", "terminated"))
MASK_KEY = ("collector", "mask")


def check_trajectory_args(
    owner: str, trajs_per_batch: Any, trajs_per_write: Any, traj_format: Any, split_trajs: bool
) -> str:
    """Checks TorchRL's trajectory arguments; returns the format (``"padded"`` by default)."""
    fmt = "padded" if traj_format is None else traj_format
    if fmt not in TRAJ_FORMATS:
        raise ValueError(
            f"{owner}: traj_format must be 'padded' or 'cat' (got {traj_format!r}). Pass one "
            "of them, or None for 'padded'."
        )
    if trajs_per_batch is None:
        if fmt != "padded" or trajs_per_write is not None:
            name = "trajs_per_write" if trajs_per_write is not None else "traj_format"
            raise ValueError(
                f"{owner}: {name} needs trajs_per_batch (got {name}="
                f"{trajs_per_write if trajs_per_write is not None else traj_format!r} and "
                "trajs_per_batch=None). Pass trajs_per_batch to collect whole trajectories."
            )
        return fmt
    for name, value in (("trajs_per_batch", trajs_per_batch), ("trajs_per_write", trajs_per_write)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                f"{owner}: {name} must be a positive int (got {value!r}). Pass the number of "
                "trajectories."
            )
    if split_trajs:
        raise ValueError(
            f"{owner}: split_trajs=True cannot be used with trajs_per_batch (got both; expected "
            "at most one). Batches of whole trajectories are padded already: drop split_trajs."
        )
    return fmt


class TrajectoryAssembler:
    """Cuts batches into trajectory pieces by ``("collector", "traj_ids")`` and joins the
    pieces of each trajectory until one ends with a done step (``done``, ``truncated`` or
    ``terminated`` under ``"next"``); complete trajectories queue in :attr:`complete`.

    Examples:
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"collector": {"traj_ids": torch.tensor([0, 0, 1])},
        ...                     "next": {"done": torch.tensor([[False], [True], [False]])}}, [3])
        >>> assembler = TrajectoryAssembler()
        >>> assembler.ingest(batch)
        >>> [t.shape[0] for t in assembler.complete], sorted(assembler.partial)
        ([2], [1])
    """

    def __init__(self) -> None:
        self.partial: dict[int, list[TensorDictBase]] = {}
        self.complete: list[TensorDictBase] = []

    def ingest(self, batch: TensorDictBase) -> None:
        """Adds the steps of ``batch`` (any batch shape, time last) to their trajectories."""
        flat = batch.reshape(-1)
        ids = flat.get(TRAJ_KEY, None)
        if ids is None:
            raise KeyError(
                f"trajs_per_batch: the batch has no {TRAJ_KEY} entry (available keys: "
                f"{sorted(map(str, flat.keys()))}). Do not drop the trajectory ids in postproc."
            )
        order = torch.argsort(ids, stable=True)
        flat, ids = flat[order], ids[order]
        uniq, counts = torch.unique_consecutive(ids, return_counts=True)
        start = 0
        for traj, count in zip(uniq.tolist(), counts.tolist()):
            piece = flat[start : start + count]
            start += count
            pieces = self.partial.setdefault(traj, [])
            pieces.append(piece)
            if _ends_done(piece):
                del self.partial[traj]
                self.complete.append(torch.cat(pieces, 0) if len(pieces) > 1 else pieces[0])

    def flush(self, traj_ids: Iterable[int] | None = None) -> None:
        """Drops every queued and unfinished trajectory (None), or the unfinished ones of
        ``traj_ids``."""
        if traj_ids is None:
            self.partial.clear()
            self.complete.clear()
            return
        for traj in traj_ids:
            self.partial.pop(traj, None)

    def emit(self, count: int, traj_format: str) -> TensorDictBase:
        """The first ``count`` complete trajectories: ``"padded"`` ``[count, max_len]`` with
        zeros after each end and a ``("collector", "mask")``, or ``"cat"`` ``[sum of lengths]``."""
        trajs, self.complete = self.complete[:count], self.complete[count:]
        if traj_format == "cat":
            return torch.cat(trajs, 0) if len(trajs) > 1 else trajs[0]
        longest = max(t.shape[0] for t in trajs)
        out = trajs[0][:1].expand(len(trajs), longest).clone().zero_()
        mask = torch.zeros(len(trajs), longest, dtype=torch.bool, device=trajs[0].device)
        for i, traj in enumerate(trajs):
            out[i, : traj.shape[0]] = traj
            mask[i, : traj.shape[0]] = True
        out.set(MASK_KEY, mask)
        return out

    def take(self, per_write: int | None) -> list[TensorDictBase]:
        """Every complete trajectory, concatenated ``per_write`` at a time (None: all in one)."""
        trajs, self.complete = self.complete, []
        size = per_write or max(len(trajs), 1)
        groups = [trajs[i : i + size] for i in range(0, len(trajs), size)]
        return [torch.cat(g, 0) if len(g) > 1 else g[0] for g in groups]


def _ends_done(piece: TensorDictBase) -> bool:
    for key in _DONE_KEYS:
        flag = piece.get(key, None)
        if flag is not None and bool(flag[-1].any()):
            return True
    return False


def iterate_trajectories(collector: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """The iterator of a collector with ``trajs_per_batch``: whole trajectories from the
    fixed-frame ``batches`` (yielded as ``trajs_per_batch`` of them at a time; with a replay
    buffer, written to it flat, ``trajs_per_write`` per ``extend``, and ``None`` yielded per
    collected batch). Unfinished trajectories are dropped after each batch when every batch
    starts with a reset (``reset_at_each_iter``)."""
    assembler = collector._assembler = TrajectoryAssembler()
    buffer = collector.replay_buffer
    count, fmt = collector.trajs_per_batch, collector.traj_format
    for batch in batches:
        if batch is None:
            continue
        assembler.ingest(batch)
        if collector.reset_at_each_iter:
            assembler.partial.clear()
        if buffer is not None:
            for trajs in assembler.take(collector.trajs_per_write):
                buffer.extend(trajs)
            yield None
            continue
        while len(assembler.complete) >= count:
            yield assembler.emit(count, fmt)
