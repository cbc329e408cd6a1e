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
    and a single batched copy.

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
        # A view per (step, leaf) spares one select per leaf and step; kept only while small.
        self._views: list[list[torch.Tensor]] | None = None
        if steps * len(self._leaves) <= _MAX_CACHED_VIEWS:
            per_leaf = [leaf.unbind(nb) for leaf in self._leaves]
            self._views = [list(step) for step in zip(*per_leaf)] if per_leaf else None

    def write(self, td: TensorDictBase, t: int, external: Sequence[torch.Tensor] = ()) -> None:
        """Copies one step into time index ``t``; ``external`` holds the values of the external
        keys, in their order (all of them, or none).

        Raises:
            KeyError: ``td`` lacks an entry the buffer holds (the data layout changed).
        """
        dim = self._dim
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
        views = self._views
        dsts = views[t] if views else [buf.select(dim, t) for buf in self._leaves]
        _copy_all(dsts if external else dsts[: len(srcs)], srcs)

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
