"""EnvRunner: one sub-env bound to its row of the batched buffers.

SerialEnv holds one runner per sub-env in its own process; each ParallelEnv worker process holds
one. A runner reads its inputs from the input buffer row, calls the sub-env's public methods and
copies the results into the output rows, so both batched envs share the exact same semantics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.batched._shared import TreeBuffer
from tdrl.envs.core import EnvBase

__all__ = ["Buffers", "EnvRunner"]


class Buffers:
    """The preallocated storage of a batched env (leading dim: the workers).

    Attributes:
        inputs: what a step or a partial reset reads: the root entries (observations, states,
            done leaves, actions) and, under ``"next"``, the state entries a policy may have
            written there (a recurrent state for a ``TensorDictPrimer``).
        next: what a step writes under ``"next"``.
        root: the root after a reset (or after the reset of ``step_and_maybe_reset``).
        reset_masks: one boolean tensor per done group, shaped like the group's ``done`` leaf.
        mask_keys: the discrete action keys (their specs may carry a mask of legal actions).
        action_masks: per mask key, the sub-envs' current action masks (all True when unset).
        mask_active: ``[workers, len(mask_keys)]``: whether the sub-env's spec holds a mask.
    """

    def __init__(
        self,
        inputs: TreeBuffer,
        nxt: TreeBuffer,
        root: TreeBuffer,
        reset_masks: list[torch.Tensor],
        mask_keys: list[NestedKey],
        action_masks: list[torch.Tensor],
        mask_active: torch.Tensor,
    ) -> None:
        self.inputs = inputs
        self.next = nxt
        self.root = root
        self.reset_masks = reset_masks
        self.mask_keys = mask_keys
        self.action_masks = action_masks
        self.mask_active = mask_active

    def _tensors(self) -> list[torch.Tensor]:
        return [*self.reset_masks, *self.action_masks, self.mask_active]

    def share_memory_(self) -> Buffers:
        """Moves every storage to shared memory (in place) and returns self."""
        for buf in (self.inputs, self.next, self.root):
            buf.td.share_memory_()
        for t in self._tensors():
            t.share_memory_()
        return self

    def to_parts(self) -> tuple:
        """The storages only, for sending to a worker process (``from_parts`` rebuilds)."""
        bufs = (self.inputs, self.next, self.root)
        return (
            tuple(b.td for b in bufs),
            tuple(b.owner for b in bufs),
            tuple(self.reset_masks),
            tuple(self.mask_keys),
            tuple(self.action_masks),
            self.mask_active,
        )

    @classmethod
    def from_parts(cls, parts: tuple) -> Buffers:
        """Rebuilds the buffers from ``to_parts()``."""
        tds, owners, reset_masks, mask_keys, action_masks, active = parts
        inputs, nxt, root = (TreeBuffer(td, owner) for td, owner in zip(tds, owners))
        return cls(
            inputs, nxt, root, list(reset_masks), list(mask_keys), list(action_masks), active
        )

    def row(self, index: int) -> Buffers:
        """The views of worker ``index``."""
        return Buffers(
            self.inputs.row(index),
            self.next.row(index),
            self.root.row(index),
            [m[index] for m in self.reset_masks],
            self.mask_keys,
            [m[index] for m in self.action_masks],
            self.mask_active[index],
        )


def _copy_state(value: Any) -> Any:
    """A state dict with its tensors cloned, nested dicts and sequences included (a
    transform's ``_extra_state`` is a dict of tensors)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, Mapping):
        return {k: _copy_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_state(v) for v in value)
    return value


class EnvRunner:
    """Runs commands on one sub-env, reading and writing its rows of the batched buffers.

    Args:
        env: the sub-env.
        rows: its views of the batched buffers (``Buffers.row(i)``).

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> from tdrl.envs.batched._serial import SerialEnv
        >>> env = SerialEnv(2, CountingEnv)
        >>> _ = env.reset()
        >>> runner = env._runners[1]
        >>> runner.step(())
        >>> env._buffers.next.td["observation"].flatten().tolist()
        [0.0, 1.0]
    """

    def __init__(self, env: EnvBase, rows: Buffers) -> None:
        self.env = env
        self.rows = rows
        self._reset_keys = [g.reset for g in env.done_groups]
        self._mask_keys = rows.mask_keys
        self._masked = [False] * len(self._mask_keys)
        self._mask_spec: object = None  # the action spec the leaves below were read from
        self._mask_leaves: list[object] = []
        done_keys = {g.done for g in env.done_groups}
        self._next_done = [t for k, t in zip(rows.next.keys, rows.next.leaves) if k in done_keys]
        # ParallelEnv buffers live on the cpu (shared memory); an env on another device gets
        # its inputs moved there (outputs are copied back by ``copy_``).
        here = rows.inputs.td.device or torch.device("cpu")
        self._device = env.device if env.device is not None and env.device != here else None
        # envs that can write their results straight into the rows (e.g. a gymnasium env): one
        # row each, the env's data unsqueezed
        self._writer = env._row_writer(rows.next.td.unsqueeze(0), rows.root.td.unsqueeze(0))
        self._row_inputs: TensorDictBase | None = None  # what the writer reads: the input row
        # the input entries the writer reads: when one is missing, the general path runs (and
        # raises its error) instead of the writer reading what an earlier step left there
        reads = set(self._writer.reads) if self._writer is not None else set()
        self._writer_reads = frozenset(i for i, k in enumerate(rows.inputs.keys) if k in reads)

    @property
    def writer_reads(self) -> frozenset[int] | None:
        """The input leaves (indices) a step reads when the sub-env writes its own rows (None:
        the sub-env has no row writer, its steps read every input leaf)."""
        return self._writer_reads if self._writer is not None else None

    def __getstate__(self) -> dict[str, Any]:
        # a copy rebuilds the input row from its own leaves (a copied TensorDict would not
        # share them: the writer would read stale actions)
        return {**self.__dict__, "_row_inputs": None}

    def _writer_inputs(self) -> TensorDictBase:
        inputs = self._row_inputs
        if inputs is None:
            inputs = self._row_inputs = self.rows.inputs.view()
        return inputs

    def _inputs(self, missing: Sequence[int]) -> TensorDictBase:
        td = self.rows.inputs.view(missing)
        return td if self._device is None else td.to(self._device)

    def step(self, missing: Sequence[int]) -> None:
        """``env.step`` on the input row; writes ``"next"`` into the next row."""
        if self._writer is not None and self._writer_reads.isdisjoint(missing):
            self._writer.step(self._writer_inputs(), 0, None)
        else:
            out = self.env.step(self._inputs(missing))
            self.rows.next.write_all(out.get("next"))
        if self._mask_keys:
            self._sync_action_masks()

    def step_and_maybe_reset(self, missing: Sequence[int]) -> bool:
        """``env.step_and_maybe_reset``; returns whether a reset happened.

        The next row is always written; the root row only after a reset (otherwise the root
        equals ``"next"`` on every root key, and the caller reads it from there).
        """
        if self._writer is not None and self._writer_reads.isdisjoint(missing):
            reset = self._writer.step(self._writer_inputs(), 0, 0)
        else:
            out, root = self.env.step_and_maybe_reset(self._inputs(missing))
            self.rows.next.write_all(out.get("next"))
            reset = any(d.item() if d.numel() == 1 else bool(d.any()) for d in self._next_done)
            if reset:
                self.rows.root.write_all(root)
        if self._mask_keys:
            self._sync_action_masks()
        return reset

    def reset(self, groups: Sequence[int] | None, missing: Sequence[int]) -> None:
        """Full reset when ``groups`` is None, else a partial reset of the masked groups."""
        if groups is None:
            out = self.env.reset()
        else:
            td = self._inputs(missing)
            for g in groups:
                mask = self.rows.reset_masks[g]
                td.set(self._reset_keys[g], mask if self._device is None else mask.to(self._device))
            out = self.env.reset(td)
        self.rows.root.write_all(out)
        if self._mask_keys:
            self._sync_action_masks()

    def _sync_action_masks(self) -> None:
        """Publishes the masks of the sub-env's discrete action specs (set by e.g. ActionMask)."""
        spec = self.env.full_action_spec
        if spec is not self._mask_spec:  # specs are replaced (not edited) when they change
            self._mask_spec, self._mask_leaves = spec, [spec[key] for key in self._mask_keys]
        for j, leaf in enumerate(self._mask_leaves):
            mask = getattr(leaf, "mask", None)
            if mask is not None:
                self.rows.action_masks[j].copy_(mask)
                if not self._masked[j]:
                    self.rows.mask_active[j] = self._masked[j] = True
            elif self._masked[j]:
                self.rows.action_masks[j].fill_(True)
                self.rows.mask_active[j] = self._masked[j] = False

    def set_seed(self, seed: int | None, static_seed: bool = False) -> int | None:
        """Seeds the sub-env; returns the next seed of the chain."""
        return self.env.set_seed(seed, static_seed)

    def state_dict(self) -> dict[str, Any]:
        """The sub-env's ``state_dict()`` with its tensors copied (the caller's, not views of
        the live state)."""
        return _copy_state(self.env.state_dict())

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """``load_state_dict`` on the sub-env."""
        self.env.load_state_dict(state, strict=strict)

    def close(self) -> None:
        """Closes the sub-env."""
        self.env.close()
