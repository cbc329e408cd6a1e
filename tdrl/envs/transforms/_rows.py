"""TransformedRows: the row writer of a TransformedEnv (see ``EnvBase._row_writer``).

When the base env writes its steps straight into rows (a single gymnasium env) and every
transform has a row form, the transformed env does too: the base writer steps the env into the
rows of its own entries, then each transform's entry of the step is written through numpy
views (from the root value in the policy's output, as the transform's ``_step`` reads it);
after a done the base env resets into the reset row and each transform writes its reset value
(0) there. Row forms exist for the episode bookkeeping users put on every gym env, in their
common form (one done group, flat keys): ``StepCounter`` (the count, and the truncation at
``max_steps`` with ``update_done``) and ``RewardSum`` (the sum of ``"reward"``). Any other
transform keeps the general path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core._row_run import overrides_bypassed
from tdrl.envs.transforms._episode import RewardSum
from tdrl.envs.transforms._step_counter import StepCounter

if TYPE_CHECKING:
    from tdrl.envs.core._row_run import RowWriter
    from tdrl.envs.transforms._base import Transform
    from tdrl.envs.transforms._env import TransformedEnv

__all__ = ["TransformedRows", "rows_possible"]

_ONE = torch.Size([1])
_SUM_DTYPES = (torch.float16, torch.float32, torch.float64)


def _count_form(t: StepCounter) -> tuple[str, int | None] | None:
    """``(key, max_steps)`` of a StepCounter with a row form, else None."""
    if len(t._groups) != 1:
        return None
    count, done, trunc, shape = t._groups[0]
    if type(count) is not str or done != "done" or trunc != "truncated" or shape != _ONE:
        return None
    if t.max_steps is not None and not t.update_done:
        return None
    return count, t.max_steps


def _sum_form(t: RewardSum) -> tuple[str, torch.dtype] | None:
    """``(key, dtype)`` of a RewardSum with a row form, else None."""
    out, zeros = t.out_keys, t._zeros
    if (
        list(t.in_keys) != ["reward"]
        or len(out) != 1
        or type(out[0]) is not str
        or t.reset_keys not in (None, ["_reset"])
        or len(zeros) != 1
        or zeros[0][0] != _ONE
        or zeros[0][1] not in _SUM_DTYPES
    ):
        return None
    return out[0], zeros[0][1]


def _form(t: Transform) -> tuple[str, Any, torch.dtype] | None:
    """``(key, max_steps or None, dtype)`` for a count, ``(key, "sum", dtype)`` for a sum.
    Exact types only: a subclass may change what its step does."""
    if type(t) is StepCounter:
        count = _count_form(t)
        return None if count is None else (count[0], count[1], torch.int64)
    if type(t) is RewardSum:
        total = _sum_form(t)
        return None if total is None else (total[0], "sum", total[1])
    return None


def rows_possible(env: TransformedEnv) -> bool:
    """Whether ``env`` may have a row writer: the TransformedEnv's own methods, transforms of
    the row kinds, no inverse maps, no checks, the base env's device, and a base env that may
    have one."""
    from tdrl.envs.transforms._env import TransformedEnv

    return (
        not overrides_bypassed(env, TransformedEnv)
        and not env._inverse
        and not env.run_type_checks
        and not env.validate
        and env.device == env.base_env.device
        and all(type(t) in (StepCounter, RewardSum) for t in env._flat)
        and env.base_env._rows_possible()
    )


class TransformedRows:
    """The row writer of a TransformedEnv (built by :meth:`build`).

    ``counts`` and ``sums`` hold, per transform, its key, the transform (for errors) and its
    next and root row tensors (and ``max_steps`` / the reward rows).
    """

    reads: tuple[str, ...]

    def __init__(
        self,
        base: RowWriter,
        counts: list[tuple[str, StepCounter, int | None, torch.Tensor, torch.Tensor]],
        sums: list[tuple[str, RewardSum, torch.Tensor, torch.Tensor]],
        flags: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> None:
        self._base = base
        self._tensors = (counts, sums, flags)
        self.reads = (*base.reads, *(c[0] for c in counts), *(t[0] for t in sums))
        self._views()

    def _views(self) -> None:
        """numpy views of the row tensors (made again after a copy, as GymRows's)."""
        counts, sums, (trunc, done, reward) = self._tensors
        rew = reward.numpy()
        self._counts = [(k, t, m, n.numpy(), r.numpy()) for k, t, m, n, r in counts]
        self._sums = [(k, t, n.numpy(), rew) for k, t, n, _ in sums]
        self._resets = [r.numpy() for *_, r in counts] + [r.numpy() for *_, r in sums]
        self._trunc, self._done = trunc.numpy(), done.numpy()

    def __getstate__(self) -> dict[str, Any]:
        views = ("_counts", "_sums", "_resets", "_trunc", "_done")
        return {k: v for k, v in self.__dict__.items() if k not in views}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    @staticmethod
    def build(
        env: TransformedEnv, nxt: TensorDictBase, root: TensorDictBase
    ) -> TransformedRows | None:
        """The writer of ``env`` for these buffers, or None when the general path is needed."""
        if not rows_possible(env):
            return None
        forms = [_form(t) for t in env._flat]
        owned = [f[0] for f in forms if f is not None]
        if (
            len(owned) != len(forms)
            or len(set(owned)) != len(owned)
            or not set(owned).isdisjoint(("reward", "done", "terminated", "truncated"))
            or not all(k in nxt.keys() and k in root.keys() for k in owned)
        ):
            return None
        base_next = nxt.select(*[k for k in nxt.keys() if k not in owned])
        base = env.base_env._row_writer(base_next, root.exclude(*owned))
        if base is None:
            return None
        counts: list[Any] = []
        sums: list[Any] = []
        for t, form in zip(env._flat, forms):
            assert form is not None
            key, kind, dtype = form
            n, r = nxt.get(key), root.get(key)
            if any(leaf.dtype != dtype or leaf.shape[1:] != _ONE for leaf in (n, r)):
                return None
            if kind == "sum":
                sums.append((key, t, n, r))
            else:
                counts.append((key, t, kind, n, r))
        flags = (nxt.get("truncated"), nxt.get("done"), nxt.get("reward"))
        return TransformedRows(base, counts, sums, flags)

    def step(self, td: TensorDictBase, row: int, reset_row: int | None) -> bool:
        """Steps the base env into the rows, then each transform; resets after a done when
        ``reset_row`` is given (see ``EnvBase._row_writer``)."""
        done = self._base.step(td, row, None)
        store = td._tensordict if type(td) is TensorDict else None
        for key, t, limit, out, _ in self._counts:
            prev = store.get(key) if store is not None else td.get(key, None)
            if prev is None:
                raise t._missing_key(key, td, "_step")
            count = prev.item() + 1
            out[row, 0] = count
            if limit is not None and count >= limit:
                self._trunc[row, 0] = self._done[row, 0] = done = True
        for key, owner, out, reward in self._sums:
            prev = store.get(key) if store is not None else td.get(key, None)
            if prev is None:
                raise owner._missing_key(key, td, "_step")
            # the exact sum of the two values rounded once to the entry's dtype: the correctly
            # rounded sum, as torch's add of the general path gives it
            out[row, 0] = prev.item() + float(reward[row, 0])
        if done and reset_row is not None:
            self.reset(reset_row)
        return done

    def reset(self, row: int) -> None:
        """Resets the base env into row ``row`` of the root buffers, then each transform."""
        self._base.reset(row)
        for values in self._resets:
            values[row, 0] = 0
