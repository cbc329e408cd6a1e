"""RowRun: the steps of a rollout (or a collector batch) written straight into preallocated rows.

An env whose ``_row_writer`` hook returns a :class:`RowWriter` (a single gymnasium env does)
can write what a step returns into row ``t`` of buffers allocated once for the whole run,
instead of building fresh tensors and a TensorDict per step that are stacked at the end.

The first step runs the general code (policy, ``env.step``, ``step_mdp``, ``maybe_reset``); its
data fixes the layout and :meth:`RowRun.start` allocates the ``"next"`` buffers of every step
(``[T, ...]``) and scratch rows for the roots after resets (``[T + 1, ...]``). At each later
step the policy receives a fresh TensorDict whose leaves are views of the rows its values
come from (row ``t - 1`` of ``"next"``, or the reset row), as the general code hands it the
previous step's ``"next"`` tensors; so an in-place change the policy makes reaches the same
entries of the result in both. The root entries of the result are copied at the end, in bulk
(row ``t`` of the root is row ``t - 1`` of ``"next"`` unless the env was reset after step
``t - 1``), and the actions the policy wrote are stacked once.

The policy may write other entries beside the actions (a mean, a log-prob): ``step_mdp``
carries them to the next root, so the policy gets its last outputs back, and they are stacked
at the end like the actions.

Each step checks that the policy returned a plain TensorDict with the root keys it was given
(the same tensors), the action keys with tensors of the spec's shape and dtype, its other
outputs with the shape and dtype of step 0's, and nothing else. Anything else ends the row run: :meth:`RowRun.steps` gives the steps done so far as
TensorDicts (views of the rows) and the caller continues with the general code; the data is
the same either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

if TYPE_CHECKING:
    from tdrl.envs.core._base import EnvBase

__all__ = ["MIN_ROWS", "RowRun", "RowWriter", "overrides_bypassed"]

MIN_ROWS = 32  # the fewest steps worth rows (their set-up costs ~10 steps of the general loop)
_FIRST_ROWS = 64  # rows allocated first when a run may stop early (doubled when full)
_from_numpy = torch.from_numpy
# the dtypes the rows may hold (they are written and read through numpy views)
_NUMPY_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64,
}  # fmt: skip


# the methods a row step stands in for: a subclass that changes one keeps the general path
_BYPASSED = (
    "step", "_step", "reset", "_reset", "step_and_maybe_reset", "maybe_reset", "step_mdp",
    "any_done", "_merge_reset", "_fill_done", "_check_actions",
)  # fmt: skip


def overrides_bypassed(env: Any, base: type) -> bool:
    """Whether the class of ``env`` overrides, below ``base`` (the class that writes its rows),
    one of the methods a row step stands in for."""
    cls = type(env)
    return any(getattr(cls, name) is not getattr(base, name) for name in _BYPASSED)


class RowWriter(Protocol):
    """What ``EnvBase._row_writer`` returns: steps the env into rows of its buffers.

    Attributes:
        reads: the root entries a step reads from its input (the actions, a transform's
            running values).
    """

    reads: tuple[str, ...]

    def step(self, td: TensorDictBase, row: int, reset_row: int | None) -> bool:
        """Steps with the actions of ``td``, writes every ``"next"`` entry into row ``row``
        and returns whether the episode ended; then, given ``reset_row``, resets into that
        row of the root buffers."""
        ...

    def reset(self, row: int) -> None:
        """Resets the env into row ``row`` of the root buffers."""
        ...


def _tensors(td: Any) -> dict[str, torch.Tensor] | None:
    """The leaves of a plain, unnamed TensorDict of batch ``()`` holding cpu tensors only, of
    dtypes numpy has, that do not require grad."""
    if type(td) is not TensorDict or td._batch_size or td._has_names():
        return None
    store = td._tensordict
    for value in store.values():
        if (
            type(value) is not torch.Tensor
            or value.device.type != "cpu"
            or value.requires_grad
            or value.dtype not in _NUMPY_DTYPES
        ):
            return None
    return dict(store)


class RowRun:
    """The rows of one run (see the module docs); built by :meth:`start`.

    Attributes:
        t: the number of steps done (the row the next step writes).
    """

    def __init__(
        self,
        env: EnvBase,
        first: TensorDict,
        root: TensorDict,
        layout: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]],
        rows: int,
        steps: int,
    ) -> None:
        self.env = env
        self.t = 1
        self._first, self._root1 = first, root
        self._next_keys, self._root_keys, carried = layout
        self._steps = steps
        fstore = first._tensordict
        # the policy's outputs: the actions (checked against their specs), then the other
        # entries it writes (carried to the next root by step_mdp, checked against step 0)
        actions = [path[0] for path, _, _ in env._action_paths]
        self._out_keys = [*actions, *carried]
        self._out_checks = [(p[0], s, d) for p, s, d in env._action_paths] + [
            (k, fstore[k].shape, fstore[k].dtype) for k in carried
        ]
        self._outputs: list[list[torch.Tensor]] = [[fstore[k]] for k in self._out_keys]
        self._carried = [(k, self._outputs[len(actions) + i]) for i, k in enumerate(carried)]
        self._reset_rows: list[int] = []  # rows >= 2 whose root the writer wrote after a reset
        self._from_reset = False  # whether the last step reset the env
        # the root entries from the rows handed to the policy: it must return them, its outputs
        # and nothing else (as many keys, these tensors, outputs of their shape and dtype)
        root_store = root._tensordict
        self._given: dict[str, torch.Tensor] = {k: root_store[k] for k in self._root_keys}
        self._n_keys = len(self._root_keys) + len(self._out_keys)
        self._batch = first._batch_size
        self._writer: RowWriter | None = None
        self._alloc(rows)

    @staticmethod
    def start(
        env: EnvBase, first: TensorDictBase, root: TensorDictBase, steps: int, *, exact: bool
    ) -> RowRun | None:
        """The run after the first step (``first``: its data, holding ``"next"``; ``root``: the
        root before the second step), or None when the general code must go on.

        ``steps`` is the most steps the run may take; with ``exact`` it takes all of them (the
        buffers get their final size at once), else they start small and grow.
        """
        if env.batch_size or steps < 2 or not env._rows_possible():
            return None
        layout = RowRun._layout(env, first, root)
        if layout is None:
            return None
        run = RowRun(env, first, root, layout, steps if exact else min(steps, _FIRST_ROWS), steps)  # type: ignore[arg-type]
        return run if run._writer is not None else None

    @staticmethod
    def _layout(
        env: EnvBase, first: TensorDictBase, root: TensorDictBase
    ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
        """``(next keys, root keys, carried keys)`` when every step can be written into rows:
        flat plain data, action keys at the root, and a root that ``step_mdp`` takes from
        ``"next"`` (the root keys) and from the policy's other outputs (the carried keys, e.g.
        a log-prob), with the entries (shapes, dtypes) of the first step."""
        if any(len(path) != 1 for path, _, _ in env._action_paths):
            return None
        fleaves = _tensors(first.exclude("next") if type(first) is TensorDict else None)
        nxt = _tensors(first._tensordict.get("next") if type(first) is TensorDict else None)
        rleaves = _tensors(root)
        if fleaves is None or nxt is None or rleaves is None:
            return None
        probe = env._step_mdp(first)._tensordict  # the root layout of every later step
        actions = {path[0] for path, _, _ in env._action_paths}
        own = [k for k in probe if k in nxt and probe[k] is nxt[k]]
        carried = [k for k in probe if k not in own]
        if (
            not actions <= fleaves.keys()
            or set(fleaves) != {*own, *actions, *carried}
            or set(rleaves).difference(actions) != set(probe)  # the root may keep the actions
            or any(k in actions or probe[k] is not fleaves.get(k) for k in carried)
        ):
            return None
        for k in own:
            for other in (nxt[k], rleaves[k]):
                if other.shape != fleaves[k].shape or other.dtype != fleaves[k].dtype:
                    return None
        return tuple(nxt), tuple(own), tuple(carried)

    def _alloc(self, rows: int) -> None:
        """(Re)allocates the buffers for ``rows`` steps (keeping the rows written so far) and
        binds the env's writer to them."""
        nxt = self._first._tensordict["next"]._tensordict
        old = getattr(self, "_next", None), getattr(self, "_reset", None)
        cpu = torch.device("cpu")
        self._next = {
            k: torch.empty((rows, *v.shape), dtype=v.dtype, device=cpu) for k, v in nxt.items()
        }
        self._reset = {
            k: torch.empty((rows + 1, *nxt[k].shape), dtype=nxt[k].dtype, device=cpu)
            for k in self._root_keys
        }
        for bufs, prev in zip((self._next, self._reset), old):
            for k, buf in (prev or {}).items():
                kept = min(len(buf), self.t + 1)  # the rows written so far
                bufs[k][:kept].copy_(buf[:kept])
        self._rows = rows
        self._writer = self.env._row_writer(
            TensorDict._new_unsafe(self._next, batch_size=torch.Size([rows]), nested=False),
            TensorDict._new_unsafe(self._reset, batch_size=torch.Size([rows + 1]), nested=False),
        )
        self._next_np = [(k, self._next[k].numpy()) for k in self._root_keys]
        self._reset_np = [(k, self._reset[k].numpy()) for k in self._root_keys]

    # ------------------------------------------------------------------ steps
    def root(self) -> TensorDict:
        """The root before step ``t``: a fresh TensorDict of views of its rows."""
        t = self.t
        if self._from_reset:
            given = {k: _from_numpy(a[t]) for k, a in self._reset_np}
        else:
            given = {k: _from_numpy(a[t - 1]) for k, a in self._next_np}
        self._given = given
        if self._carried:  # the policy's last outputs, as step_mdp carries them
            given = {**given, **{k: refs[-1] for k, refs in self._carried}}
        return TensorDict._new_unsafe(given, batch_size=self._batch, nested=False)

    def advance(self, td: TensorDictBase, reset: bool) -> int:
        """Steps the env into row ``t`` with the policy's output ``td`` (from the last
        :meth:`root`) when the rows can take it: the root keys with the tensors it was given,
        tensor actions of the spec's shape and dtype, nothing else. Returns -1 when they cannot
        (nothing was stepped), else whether the episode ended (1) or not (0); after an end,
        with ``reset``, the env was reset and the next root is its reset."""
        if type(td) is not TensorDict or td._batch_size != self._batch:
            return -1
        store = td._tensordict
        if len(store) != self._n_keys:  # with every key below present: no other key
            return -1
        get = store.get
        for key, value in self._given.items():
            if get(key) is not value:
                return -1
        for key, shape, dtype in self._out_checks:
            value = get(key)
            if type(value) is not torch.Tensor or value.dtype != dtype or value.shape != shape:
                return -1
        t = self.t
        if t == self._rows:
            self._alloc(min(2 * self._rows, self._steps))
        for refs, key in zip(self._outputs, self._out_keys):
            refs.append(store[key])
        done = self._writer.step(td, t, t + 1 if reset else None)  # type: ignore[union-attr]
        self._from_reset = from_reset = done and reset
        if from_reset:
            self._reset_rows.append(t + 1)
        self.t = t + 1
        return 1 if done else 0

    # ------------------------------------------------------------------ results
    def steps(self) -> list[TensorDictBase]:
        """The steps done so far as the general code holds them: stepped TensorDicts whose
        leaves are the rows (for the general code to continue the run)."""
        out: list[TensorDictBase] = [self._first]
        resets = set(self._reset_rows)
        for t in range(1, self.t):
            root = self._root1._tensordict if t == 1 else self._row_root(t, t in resets)
            values: dict[str, Any] = {}
            for key in self._first._tensordict:
                if key == "next":
                    nxt = {k: v[t] for k, v in self._next.items()}
                    values[key] = TensorDict._new_unsafe(nxt, batch_size=self._batch, nested=False)
                elif key in self._out_keys:
                    values[key] = self._outputs[self._out_keys.index(key)][t]
                else:
                    values[key] = root[key]
            out.append(TensorDict._new_unsafe(values, batch_size=self._batch, nested=False))
        return out

    def _row_root(self, t: int, reset: bool) -> dict[str, torch.Tensor]:
        src, row = (self._reset, t) if reset else (self._next, t - 1)
        return {k: src[k][row] for k in self._root_keys}

    def result(self) -> TensorDict:
        """The ``[t]`` data of the run (fresh memory, the layout of the first step)."""
        n, fstore = self.t, self._first._tensordict
        nstore = fstore["next"]._tensordict
        if n == self._rows:
            nxt = dict(self._next)
        else:
            nxt = {k: v[:n].clone() for k, v in self._next.items()}
        for key, value in nstore.items():
            nxt[key][0] = value
        out: dict[str, Any] = {}
        for key, value in fstore.items():
            if key == "next":
                out[key] = TensorDict._new_unsafe(
                    {k: nxt[k] for k in nstore}, batch_size=torch.Size([n]), nested=False
                )
            elif key in self._out_keys:
                out[key] = torch.stack(self._outputs[self._out_keys.index(key)][:n])
            else:
                out[key] = self._root_column(key, value, n)
        return TensorDict._new_unsafe(out, batch_size=torch.Size([n]), nested=False)

    def fill(self, dst: TensorDictBase) -> None:
        """Writes the data of the run into ``dst`` (a ``[t]`` TensorDict holding at least the
        run's entries, e.g. a collector's batch memory); its other entries are untouched."""
        n, fstore = self.t, self._first._tensordict
        for key, value in fstore.items():
            if key == "next":
                target = dst.get("next")
                for k, v in self._next.items():
                    column = target.get(k)
                    column[1:].copy_(v[1:n])
                    column[0].copy_(value._tensordict[k])
            elif key in self._out_keys:
                refs = self._outputs[self._out_keys.index(key)][:n]
                column = dst.get(key)
                try:
                    torch.stack(refs, 0, out=column)
                except (RuntimeError, TypeError):  # dtype or device differs: copy as write does
                    column.copy_(torch.stack(refs))
            else:
                self._root_column(key, value, n, dst.get(key))

    def _root_column(
        self, key: str, first: torch.Tensor, n: int, column: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Root entry ``key`` of every step (``n >= 2``; into ``column`` when given): the first
        root, the root before step 1, then ``"next"`` of the step before or the reset row."""
        if column is None:
            column = torch.empty((n, *first.shape), dtype=first.dtype, device=first.device)
        if column.device.type != "cpu":  # torch copies (a collector's memory on a device)
            column[0] = first
            column[1] = self._root1._tensordict[key]
            column[2:] = self._next[key][1 : n - 1]
            rows = self._resets(n)
            if rows is not None:
                index = torch.from_numpy(rows)
                column.index_copy_(0, index.to(column.device), self._reset[key][index])
            return column
        # cpu: numpy writes, several times cheaper than torch's on rows this small
        out = column.numpy()
        out[0] = first.numpy()
        out[1] = self._root1._tensordict[key].numpy()
        out[2:] = self._next[key].numpy()[1 : n - 1]
        rows = self._resets(n)
        if rows is not None:
            out[rows] = self._reset[key].numpy()[rows]
        return column

    def _resets(self, n: int) -> np.ndarray | None:
        """The rows below ``n`` whose root is a reset (as an index array), or None."""
        rows = self._reset_rows
        if not rows:
            return None
        if rows[-1] >= n:
            rows = [r for r in rows if r < n]
        return np.asarray(rows, dtype=np.int64) if rows else None
