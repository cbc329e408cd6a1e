"""Preallocated TensorDict buffers with a fixed leaf order, for copies in and out of batched envs.

A batched env allocates its buffers once from the specs (shared memory for ParallelEnv). Every
step then copies leaves in place and builds fresh TensorDicts around known tensors, without
walking keys or building TensorDicts from dicts of unknown structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core._keys import as_key, key_tuple
from tdrl.errors import SpecError

__all__ = ["TreeBuffer"]

_FOREACH = hasattr(torch, "_foreach_copy_") and hasattr(torch, "_foreach_clone")


def _copy_all(dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
    """``dst.copy_(src)`` for each pair, in one dispatch when torch offers it (~2x faster)."""
    if len(dsts) == 1:  # e.g. the actions alone: cheaper than a foreach of one
        dsts[0].copy_(srcs[0])
    elif _FOREACH and dsts:
        torch._foreach_copy_(dsts, srcs)
    else:
        for dst, src in zip(dsts, srcs):
            dst.copy_(src)


def _clone_all(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    if _FOREACH and tensors:
        return list(torch._foreach_clone(tensors))
    return [t.clone() for t in tensors]


def _lookup(src: TensorDictBase, path: tuple[str, ...], key: NestedKey) -> Any:
    """``src.get(key, None)``, walking plain TensorDicts' storage dicts directly (10x faster)."""
    node: Any = src
    for part in path:
        store = node.__dict__.get("_tensordict") if type(node) is TensorDict else None
        if store is None:
            return src.get(key, None)
        node = store.get(part)
        if node is None:
            return None
    return node


class _Node:
    """The nesting of a TensorDict: per node its batch size and children (leaf index or node)."""

    __slots__ = ("batch_size", "children", "device")

    def __init__(self, td: TensorDictBase, index: dict[NestedKey, int], prefix: tuple) -> None:
        self.batch_size = td.batch_size
        self.device = td.device
        self.children: list[tuple[str, int | _Node]] = []
        for name, value in td.items():
            key = as_key((*prefix, name))
            if isinstance(value, TensorDictBase):
                self.children.append((name, _Node(value, index, (*prefix, name))))
            else:
                self.children.append((name, index[key]))

    def build(self, leaves: Sequence[torch.Tensor], skip: frozenset[int]) -> TensorDict:
        source: dict[str, Any] = {}
        for name, child in self.children:
            if isinstance(child, _Node):
                sub = child.build(leaves, skip)
                if not sub.is_empty() or not child.children:
                    source[name] = sub
            elif child not in skip:
                source[name] = leaves[child]
        return TensorDict._new_unsafe(source, batch_size=self.batch_size, device=self.device)


class TreeBuffer:
    """A TensorDict whose leaves are preallocated, with a flat leaf list for fast copies.

    Args:
        td: the storage (its leaves are written in place; it may live in shared memory).
        owner: the name used in error messages (e.g. ``"ParallelEnv.step"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> buf = TreeBuffer(TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2, 3)}}, [2]))
        >>> buf.write(TensorDict({"a": torch.ones(2)}, [2]))
        (1,)
        >>> out = buf.clone()
        >>> out["a"].tolist(), out["n", "b"].shape
        ([1.0, 1.0], torch.Size([2, 3]))
    """

    def __init__(self, td: TensorDictBase, owner: str = "TreeBuffer") -> None:
        self.td = td
        self.owner = owner
        self.keys: list[NestedKey] = [as_key(k) for k in td.keys(True, True)]
        for key in self.keys:
            if not isinstance(td.get(key), torch.Tensor):
                raise TypeError(
                    f"{owner}: entry {key!r} is not a tensor (got {type(td.get(key)).__name__}; "
                    "expected tensor entries only). Non-tensor specs are not supported by "
                    "batched envs yet: keep such data out of the specs."
                )
        self.leaves: list[torch.Tensor] = [td.get(k) for k in self.keys]
        self._paths = [key_tuple(k) for k in self.keys]
        self._index = {k: i for i, k in enumerate(self.keys)}
        self._root = _Node(td, self._index, ())
        self._no_skip: frozenset[int] = frozenset()

    def write(self, src: TensorDictBase, only: Sequence[int] | None = None) -> tuple[int, ...]:
        """Copies the leaves ``src`` has into the buffer; returns the indices of missing keys.

        ``only``: the indices of the leaves to copy (default: all); the others are left as
        they are and not reported missing.

        Raises:
            SpecError: a present entry has the wrong shape.
        """
        missing: list[int] = []
        dsts, values = [], []
        keys, paths, leaves = self.keys, self._paths, self.leaves
        for i in range(len(keys)) if only is None else only:
            dst = leaves[i]
            value = _lookup(src, paths[i], keys[i])
            if value is None:
                missing.append(i)
                continue
            if value.shape != dst.shape:
                self._bad_shape(keys[i], value, dst)
            dsts.append(dst)
            values.append(value)
        _copy_all(dsts, values)
        return tuple(missing)

    def _bad_shape(self, key: NestedKey, value: Any, dst: torch.Tensor) -> None:
        raise SpecError(
            f"{self.owner}: entry {key!r} has the wrong shape (got {tuple(value.shape)}; "
            f"expected {tuple(dst.shape)} from the specs). Pass data shaped like "
            "env.fake_tensordict()."
        )

    def write_all(self, src: TensorDictBase) -> None:
        """Copies every leaf from ``src``; raises ``KeyError`` naming the first missing one."""
        values = []
        for key, path, dst in zip(self.keys, self._paths, self.leaves):
            value = _lookup(src, path, key)
            if value is None:
                raise KeyError(
                    f"{self.owner}: the env did not return {key!r}, which its specs declare "
                    f"(got keys {sorted(map(str, src.keys(True, True)))}). Make the sub-env return "
                    "every entry of its specs (check_env_specs(env) finds such gaps)."
                )
            if value.shape != dst.shape:
                self._bad_shape(key, value, dst)
            values.append(value)
        _copy_all(self.leaves, values)

    def leaf(self, key: NestedKey) -> torch.Tensor:
        """The buffer tensor of ``key``."""
        return self.leaves[self._index[key]]

    def view(self, skip: Sequence[int] = ()) -> TensorDict:
        """A new TensorDict whose leaves are the buffer tensors (minus the ``skip`` indices)."""
        return self._root.build(self.leaves, frozenset(skip) if skip else self._no_skip)

    def clone(self) -> TensorDict:
        """A new TensorDict holding fresh copies of every leaf (safe to keep across steps)."""
        return self._root.build(_clone_all(self.leaves), self._no_skip)

    def empty(self) -> tuple[TensorDict, list[torch.Tensor]]:
        """A new TensorDict of new, uninitialised tensors shaped like the leaves, and these
        tensors in leaf order (``fill`` copies the buffer into them)."""
        leaves = [torch.empty_like(t) for t in self.leaves]
        return self._root.build(leaves, self._no_skip), leaves

    def fill(self, leaves: list[torch.Tensor]) -> None:
        """Copies every buffer leaf into ``leaves`` (from ``empty``)."""
        _copy_all(leaves, self.leaves)

    def row(self, index: int) -> TreeBuffer:
        """The buffer of row ``index`` of the first batch dim (views of this buffer)."""
        return TreeBuffer(self.td[index], self.owner)

    def __len__(self) -> int:
        return len(self.keys)
