"""CollectorRows: the steps of a Collector batch written straight into preallocated rows.

The Collector runs step 0 of each batch with the general code (policy, ``env.step``, the
batch memory's ``record``, trajectory ids, ``step_mdp``, ``maybe_reset``). When its env has a
row writer (a single gymnasium env, see ``EnvBase._row_writer``) the other steps then go
through a :class:`~tdrl.envs.core._row_run.RowRun`: the env writes each step into rows
allocated for the batch, the policy receives fresh TensorDicts of views of those rows, the
trajectory ids are counted as python ints, and :meth:`CollectorRows.finish` copies the rows
into the batch memory in bulk after the general ``flush``. A policy output the rows cannot take
(other keys, other tensors) ends the row steps: the steps done so far are recorded as the
general code records them and the general loop goes on with the same data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDictBase

from tdrl.envs.core._row_run import MIN_ROWS, RowRun

if TYPE_CHECKING:
    from tdrl.collectors._collector import Collector

__all__ = ["CollectorRows"]


class CollectorRows:
    """The row steps of one batch (built by :meth:`start`)."""

    def __init__(self, collector: Collector, run: RowRun) -> None:
        self._col = collector
        self._run = run
        self._ids: list[int] = []  # the trajectory id of steps 1, 2, ...

    @staticmethod
    def start(
        collector: Collector, first: TensorDictBase, root: TensorDictBase
    ) -> CollectorRows | None:
        """The row steps after step 0 (``first``: its data; ``root``: the root of step 1), or
        None when the general loop must run the batch."""
        env = collector.env
        if (
            not env._rows_possible()
            or len(collector._ids) != 1
            or collector.frames_per_batch <= MIN_ROWS
        ):
            return None
        run = RowRun.start(env, first, root, collector.frames_per_batch, exact=True)
        return None if run is None else CollectorRows(collector, run)

    def collect(self, root: TensorDictBase) -> tuple[TensorDictBase, int, TensorDictBase | None]:
        """Runs steps 1, 2, ... Returns ``(root, t, acted)``: the root after the last step
        done, the step the general loop goes on from (the batch length when every step is
        done) and, when the rows could not take the policy's output, that output (already
        acted: the general loop steps it without calling the policy again)."""
        col, run = self._col, self._run
        steps, numel, act, advance = col.frames_per_batch, col._numel, col._act, run.advance
        traj_ids = col._ids[0]
        traj, next_id = int(traj_ids.ids), traj_ids.next_id
        ids = self._ids
        while run.t < steps:
            td = act(root)
            done = advance(td, True)
            if done < 0:
                self._sync(traj, next_id)
                self._record_done_steps()
                return td, run.t, td
            ids.append(traj)
            col.frames += numel
            if done:
                traj, next_id = next_id, next_id + 1
            root = run.root()
        self._sync(traj, next_id)
        return root, steps, None

    def _sync(self, traj: int, next_id: int) -> None:
        """Hands the trajectory counter back to the collector's ids."""
        traj_ids = self._col._ids[0]
        traj_ids.ids = torch.tensor(traj, dtype=traj_ids.ids.dtype).reshape(traj_ids.shape)
        traj_ids.next_id = next_id

    def _record_done_steps(self) -> None:
        """Records steps 1 .. t-1 into the batch memory as the general loop would have."""
        buffer = self._col._buffer
        assert buffer is not None
        dtype = self._col._ids[0].ids.dtype
        for t, td in enumerate(self._run.steps()[1:], start=1):
            buffer.record(td, t, [torch.tensor(self._ids[t - 1], dtype=dtype)])

    def finish(self, data: TensorDictBase) -> None:
        """Writes every step of the batch into ``data`` (the batch memory, after ``flush`` has
        written step 0): the rows, then the trajectory ids of steps 1, 2, ..."""
        self._run.fill(data)
        column = data.get(self._col._ids[0].key)
        column[1:].copy_(torch.tensor(self._ids, dtype=column.dtype))
