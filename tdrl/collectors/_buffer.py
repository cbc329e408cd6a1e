"""RolloutBuffer: the ``[*B, T]`` batch memory a collector writes into, step by step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.batched._shared import TreeBuffer, _copy_all
from tdrl.envs.core._keys import as_key, key_tuple

__all__ = ["RolloutBuffer"]

_MAX_CACHED_VIEWS = 1 << 15


class RolloutBuffer:
    """Preallocated ``[*B, T]`` storage shaped like one step of data, written in place.

    The leaf list and key paths are cached at construction, so ``write`` is one lookup per leaf
    and a single batched copy. A collector instead ``record``s each step (references to its
    tensors) and ``flush``es the batch at its end: one ``torch.stack`` per leaf into the
    storage, so every value is copied once and the per-step cost is the lookups alone.

    Args:
        example: one step of data (batch ``[*B]``) whose keys, shapes and dtypes are kept.
        steps: the time length ``T``.
        device: where the storage lives (the example's device when None).
        external: keys allocated here whose values the caller passes to ``write`` (e.g. ids
            kept outside the step data).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> buf = RolloutBuffer(TensorDict({"x": torch.zeros(2)}, [2]), steps=3)
        >>> buf.write(TensorDict({"x": torch.ones(2)}, [2]), 1)
        >>> buf.data["x"].tolist()
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    """

    def __init__(
        self,
        example: TensorDictBase,
        steps: int,
        device: torch.device | None = None,
        external: Sequence[NestedKey] = (),
    ) -> None:
        nb = example.ndim
        data = example.unsqueeze(nb).expand(*example.batch_size, steps)
        data = data.to(device) if device is not None else data
        self.data = data.clone().zero_()
        self._dim = nb
        skip = {as_key(k) for k in external}
        keys = [as_key(k) for k in self.data.keys(True, True)]
        self._keys = [k for k in keys if k not in skip]
        # leaves grouped by parent node: one walk per node, then one dict lookup per leaf
        nodes: dict[tuple[str, ...], list[str]] = {}
        for key in self._keys:
            *parent, name = key_tuple(key)
            nodes.setdefault(tuple(parent), []).append(name)
        self._nodes = list(nodes.items())
        self._keys = [as_key((*parent, n)) for parent, names in self._nodes for n in names]
        self.external = [as_key(k) for k in external]
        self._leaves = [self.data.get(k) for k in (*self._keys, *self.external)]
        self._tree = TreeBuffer(self.data, "RolloutBuffer")
        self._pending: list[list[torch.Tensor]] = []
        self._step_shapes = [leaf.shape[:nb] + leaf.shape[nb + 1 :] for leaf in self._leaves]
        # A view per (step, leaf) spares one select per leaf and step; made on the first
        # write (record/flush need none) and kept only while small.
        self._views: list[list[torch.Tensor]] | None = None
        self._views_made = steps * len(self._leaves) > _MAX_CACHED_VIEWS

    def write(self, td: TensorDictBase, t: int, external: Sequence[torch.Tensor] = ()) -> None:
        """Copies one step into time index ``t``; ``external`` holds the values of the external
        keys, in their order (all of them, or none).

        Raises:
            KeyError: ``td`` lacks an entry the buffer holds (the data layout changed).
        """
        srcs = self._gather(td, t, external)
        if not self._views_made:
            self._views_made = True
            per_leaf = [leaf.unbind(self._dim) for leaf in self._leaves]
            self._views = [list(step) for step in zip(*per_leaf)] if per_leaf else None
        views = self._views
        dsts = views[t] if views else [buf.select(self._dim, t) for buf in self._leaves]
        _copy_all(dsts if external else dsts[: len(srcs)], srcs)

    def record(self, td: TensorDictBase, t: int, external: Sequence[torch.Tensor] = ()) -> None:
        """Keeps the leaves of step ``t`` for :meth:`flush` (``write`` without the copy).

        Steps must be recorded in order from ``t = 0`` (step 0 starts a new batch); the values
        are copied into the storage by ``flush``, so they must not change in place before it
        (env outputs and policy outputs are fresh tensors: they do not).

        Raises:
            KeyError: ``td`` lacks an entry the buffer holds (the data layout changed).
        """
        if t == 0:  # a new batch (what an interrupted one recorded is dropped)
            self._pending = []
        if t != len(self._pending):
            raise RuntimeError(
                f"RolloutBuffer.record: steps must be recorded in order (got step {t}; expected "
                f"step {len(self._pending)}). Call flush() after the last step of a batch."
            )
        self._pending.append(self._gather(td, t, external))

    def flush(self) -> None:
        """Copies the recorded steps into the storage: one ``torch.stack`` per leaf into its
        memory instead of one copy per leaf and step (the steps' values are cast and
        broadcast as ``write`` would when a stack cannot take them)."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        dim = self._dim
        for dst, shape, column in zip(self._leaves, self._step_shapes, zip(*pending)):
            # a stack writes into dst only when its shape is dst's (else it would resize dst)
            if len(column) == dst.shape[dim] and column[0].shape == shape:
                try:
                    torch.stack(column, dim, out=dst)
                    continue
                except (RuntimeError, TypeError):  # dtype, shape or device differs
                    pass
            for t, value in enumerate(column):
                dst.select(dim, t).copy_(value)

    def _gather(
        self, td: TensorDictBase, t: int, external: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        srcs: list[torch.Tensor] = []
        for parent, names in self._nodes:
            node = _node(td, parent)
            store = node.__dict__.get("_tensordict") if type(node) is TensorDict else None
            for name in names:
                value = store.get(name) if store is not None else _get(node, name)
                if value is None:
                    self._missing(td, (*parent, name), t)
                srcs.append(value)
        srcs.extend(external)
        return srcs

    def clone(self) -> TensorDict:
        """A copy of the batch in fresh memory (every leaf cloned in one batched call).

        Entries a caller added to :attr:`data` are not copied: the copy holds what the buffer
        writes.
        """
        return self._tree.clone()

    @staticmethod
    def _missing(td: TensorDictBase, key: tuple[str, ...], t: int) -> NoReturn:
        raise KeyError(
            f"RolloutBuffer.write: entry {as_key(key)!r} is missing at step {t} (available keys: "
            f"{sorted(map(str, td.keys(True, True)))}). The policy or env changed the keys it "
            "writes between steps; write the same keys at every step."
        )


def _get(node: Any, name: str) -> Any:
    return node.get(name, None) if node is not None else None


def _node(td: TensorDictBase, path: tuple[str, ...]) -> Any:
    node: Any = td
    for part in path:
        store = node.__dict__.get("_tensordict") if type(node) is TensorDict else None
        node = store.get(part) if store is not None else node.get(part, None)
        if node is None:
            return None
    return node
