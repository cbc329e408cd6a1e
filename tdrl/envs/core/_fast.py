"""Reads of plain TensorDicts for the hot paths (env step, step_mdp, buffers, collectors).

A plain ``TensorDict`` keeps its entries in a dict; reading that dict directly costs a tenth of
the public ``get`` (which normalises the key and dispatches on its type). Anything else (lazy
stacks, tensorclasses, subclasses) goes through the public API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "all_true",
    "exclude_flat",
    "lookup",
    "put",
    "select_flat",
    "set_next",
    "stack_plain",
    "truthy",
    "update_flat",
]


def lookup(td: TensorDictBase, path: tuple[str, ...]) -> Any:
    """``td.get(path, None)`` for a key given as a flat tuple of strings.

    Plain TensorDicts are walked through their storage dicts; the first node of another type
    answers the rest of the path with its own ``get``.

    Examples:
        >>> import torch
        >>> td = TensorDict({"a": {"b": torch.zeros(1)}}, [])
        >>> lookup(td, ("a", "b")), lookup(td, ("a", "c"))
        (tensor([0.]), None)
    """
    node: Any = td
    for i, part in enumerate(path):
        if type(node) is not TensorDict:
            rest = path[i:]
            return node.get(rest if len(rest) > 1 else rest[0], None)
        node = node._tensordict.get(part)
        if node is None:
            return None
    return node


def put(td: TensorDictBase, path: tuple[str, ...], value: Any) -> None:
    """``td.set(path, value)``; a root entry of a plain TensorDict goes straight to
    tensordict's own (cheap, still validating) setter, without the key parsing of ``set``.

    Examples:
        >>> td = TensorDict({}, [2])
        >>> put(td, ("x",), torch.zeros(2, 1)); put(td, ("n", "y"), torch.ones(2))
        >>> list(td.keys(True, True))
        ['x', ('n', 'y')]
    """
    if type(td) is TensorDict and len(path) == 1:
        td._set_str(path[0], value, inplace=False, validated=False)
    else:
        td.set(path if len(path) > 1 else path[0], value)


def set_next(td: TensorDictBase, nxt: TensorDictBase, plain: bool) -> None:
    """``td.set("next", nxt)``, skipping tensordict's validation when it has nothing to do.

    ``plain`` says whether ``td`` is a plain TensorDict. The validation casts devices, fixes
    batch sizes and dim names; when both are plain TensorDicts with the same batch size and
    device and ``td`` has no dim names, it would return ``nxt`` unchanged.
    """
    if (
        plain
        and type(nxt) is TensorDict
        and nxt._batch_size == td._batch_size
        and (td._device is None or nxt._device == td._device)
        and not td._has_names()
    ):
        td._set_str("next", nxt, inplace=False, validated=True)
    else:
        td.set("next", nxt)


def truthy(flags: torch.Tensor) -> bool:
    """Whether any entry of a boolean tensor is true (``item`` when there is one entry: a
    quarter of the cost of ``any``).

    Examples:
        >>> truthy(torch.tensor([False])), truthy(torch.tensor([[False], [True]]))
        (False, True)
    """
    if flags.numel() == 1:
        return bool(flags.item())
    return bool(flags.any())


def all_true(masks: Sequence[torch.Tensor | None]) -> bool:
    """Whether every mask is given and true everywhere.

    Examples:
        >>> all_true([torch.tensor([True])]), all_true([torch.tensor([True]), None])
        (True, False)
    """
    for mask in masks:
        if mask is None:
            return False
        if not (bool(mask.item()) if mask.numel() == 1 else bool(mask.all())):
            return False
    return True


def stack_plain(tds: Sequence[TensorDictBase], dim: int) -> TensorDict | None:
    """``torch.stack(tds, dim)`` for plain TensorDicts of one layout (same keys in the same
    order, same batch size and device, tensor leaves); ``None`` when they are not (the caller
    then uses tensordict's stack). Each leaf is one ``torch.stack`` of the steps' tensors,
    without tensordict's per-item checks (a fifth of the cost for small steps).

    Examples:
        >>> steps = [TensorDict({"x": torch.full((2,), float(i))}, [2]) for i in range(3)]
        >>> stack_plain(steps, 1)["x"].tolist()
        [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
    """
    first = tds[0]
    if type(first) is not TensorDict or not 0 <= dim <= len(first._batch_size):
        return None
    keys = tuple(first._tensordict)
    batch, device = first._batch_size, first._device
    for td in tds:
        if (
            type(td) is not TensorDict
            or td._batch_size != batch
            or td._device != device
            or tuple(td._tensordict) != keys
        ):
            return None
    stores = [td._tensordict for td in tds]
    out: dict[str, Any] = {}
    for key in keys:
        values = [store[key] for store in stores]
        kind = type(values[0])
        if kind is TensorDict:
            sub = stack_plain(values, dim)
            if sub is None:
                return None
            out[key] = sub
        elif issubclass(kind, torch.Tensor):
            try:
                out[key] = torch.stack(values, dim)
            except (RuntimeError, TypeError):  # shapes differ or a non-tensor: tensordict's
                return None  # stack decides what to do
        else:
            return None
    size = torch.Size((*batch[:dim], len(tds), *batch[dim:]))
    return TensorDict._new_unsafe(out, batch_size=size, device=device, nested=False)


def update_flat(td: TensorDictBase, other: TensorDictBase) -> TensorDictBase:
    """``td.update(other)``; a plain dict update when both are plain, unlocked, of one batch size
    and device, without names, and ``other`` holds tensors only (nothing to validate or merge).

    Examples:
        >>> a = TensorDict({"x": torch.zeros(1), "y": torch.zeros(1)}, [])
        >>> sorted(update_flat(a, TensorDict({"x": torch.ones(1)}, [])).items())[0][1]
        tensor([1.])
    """
    if (
        type(td) is TensorDict
        and type(other) is TensorDict
        and td._batch_size == other._batch_size
        and td._device == other._device
        and not td._is_locked
        and not td._has_names()
    ):
        values = other._tensordict
        if all(type(v) is torch.Tensor for v in values.values()):
            td._tensordict.update(values)
            return td
    return td.update(other)


def _flat_plain(td: TensorDictBase, keys: Sequence[Any]) -> bool:
    return type(td) is TensorDict and not td._has_names() and all(type(k) is str for k in keys)


def select_flat(td: TensorDictBase, keys: Sequence[Any]) -> TensorDictBase:
    """``td.select(*keys, strict=False)``; one dict comprehension when ``td`` is plain and
    every key is a root key (nodes are shared either way).

    Examples:
        >>> td = TensorDict({"a": torch.zeros(1), "b": torch.ones(1)}, [])
        >>> list(select_flat(td, ["b", "c"]).keys())
        ['b']
    """
    if not _flat_plain(td, keys):
        return td.select(*keys, strict=False)
    store = td._tensordict
    kept = {k: store[k] for k in keys if k in store}
    return TensorDict._new_unsafe(kept, batch_size=td._batch_size, device=td._device, nested=False)


def exclude_flat(td: TensorDictBase, keys: Sequence[Any]) -> TensorDictBase:
    """``td.exclude(*keys)``; one dict comprehension when ``td`` is plain and every key is a
    root key (nodes are shared either way).

    Examples:
        >>> td = TensorDict({"a": torch.zeros(1), "b": torch.ones(1)}, [])
        >>> list(exclude_flat(td, ["b", "c"]).keys())
        ['a']
    """
    if not _flat_plain(td, keys):
        return td.exclude(*keys)
    drop = set(keys)
    kept = {k: v for k, v in td._tensordict.items() if k not in drop}
    return TensorDict._new_unsafe(kept, batch_size=td._batch_size, device=td._device, nested=False)
