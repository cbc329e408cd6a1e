"""Small private helpers of the transforms: key lists, key display and reset-mask shaping."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.specs import Composite, TensorSpec

__all__ = [
    "KeyNotFoundError",
    "KeysArg",
    "broadcast_mask",
    "key_list",
    "key_prefix",
    "leaf_keys",
    "show_keys",
    "with_prefix",
]

KeysArg: TypeAlias = NestedKey | Sequence[NestedKey] | None


class KeyNotFoundError(KeyError):
    """A ``KeyError`` whose message prints as written (``KeyError`` quotes and escapes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


SPEC_KINDS = ("done", "reward", "observation", "action", "state")


def key_list(keys: KeysArg) -> list[NestedKey]:
    """Normalises a key argument: a str or a tuple of str is one key, a list holds several.

    Examples:
        >>> key_list("a"), key_list(("a", "b")), key_list(["a", ("b", "c")]), key_list(None)
        (['a'], [('a', 'b')], ['a', ('b', 'c')], [])
    """
    if keys is None:
        return []
    if isinstance(keys, str) or (isinstance(keys, tuple) and all(isinstance(k, str) for k in keys)):
        return [unravel_key(keys)]
    return [unravel_key(k) for k in keys]


def key_prefix(key: NestedKey) -> tuple[str, ...]:
    """Everything but the leaf name of ``key``.

    Examples:
        >>> key_prefix(("agents", "obs")), key_prefix("obs")
        (('agents',), ())
    """
    return () if isinstance(key, str) else tuple(key[:-1])


def with_prefix(prefix: tuple[str, ...], name: str) -> NestedKey:
    """``name`` under ``prefix`` as a normalised key.

    Examples:
        >>> with_prefix((), "step_count"), with_prefix(("agents",), "step_count")
        ('step_count', ('agents', 'step_count'))
    """
    return unravel_key((*prefix, name))


def show_keys(source: TensorDictBase | Composite | Iterable[Any] | None) -> list[str]:
    """Sorted printable leaf keys of a TensorDict, a Composite or an iterable of keys.

    Examples:
        >>> show_keys(["b", ("a", "c")])
        ["('a', 'c')", 'b']
    """
    if source is None:
        return []
    if isinstance(source, TensorDictBase):
        keys: Iterable[Any] = source.keys(True, True)
    elif isinstance(source, Composite):
        keys = source.keys(True, True)
    else:
        keys = source
    return sorted(str(k) if isinstance(k, tuple) else repr(k).strip("'") for k in keys)


def leaf_keys(*specs: Composite) -> list[NestedKey]:
    """Leaf keys of several composites, in order, without duplicates.

    Examples:
        >>> from tdrl.specs import Unbounded
        >>> leaf_keys(Composite(a=Unbounded()), Composite(a=Unbounded(), b={"c": Unbounded()}))
        ['a', ('b', 'c')]
    """
    out: dict[NestedKey, None] = {}
    for spec in specs:
        for k in spec.keys(True, True):
            out[unravel_key(k)] = None
    return list(out)


def spec_holding(specs: dict[str, Composite], key: NestedKey) -> TensorSpec | None:
    """The leaf spec of ``key`` in the first of observation/reward/done/state that holds it."""
    for kind in ("observation", "reward", "done", "state"):
        leaf = specs[kind].get(key, None)
        if leaf is not None:
            return leaf  # type: ignore[no-any-return]
    return None


def group_mask(
    env: Any,
    tensordict: TensorDictBase,
    key: NestedKey,
    like: torch.Tensor,
    reset_key: NestedKey | None = None,
    masks: list[torch.Tensor | None] | None = None,
) -> torch.Tensor | None:
    """Where the done group of ``key`` (or the group of ``reset_key``) resets in ``env``.

    Shaped to broadcast against ``like``; ``None`` when every entry resets (no ``_reset``
    entries). ``masks`` are ``env._reset_plan.masks(tensordict)`` when already computed.
    """
    plan = env._reset_plan
    if masks is None:
        masks = plan.masks(tensordict)
        if masks is None:
            return None
    if reset_key is not None:
        gi = [g.reset for g in env.done_groups].index(reset_key)
    else:
        gi = plan.owner(key)
    mask = masks[gi] if gi >= 0 else plan.any_reset(masks)
    if mask is None:  # the group does not reset
        return torch.zeros((), dtype=torch.bool, device=like.device)
    mask = broadcast_mask(mask, len(env.batch_size), like.ndim)
    return mask if mask.device == like.device else mask.to(like.device)


def broadcast_mask(mask: torch.Tensor, batch_ndim: int, ndim: int) -> torch.Tensor:
    """Shapes a done-group mask so that it broadcasts against a value with ``ndim`` dims.

    Done-shaped masks end with a singleton dim (``[*B, 1]`` or ``[*B, n_agents, 1]``); trailing
    singletons beyond the batch dims are dropped, extra dims are reduced with ``any`` and the
    mask is right-padded with singleton dims.

    Examples:
        >>> broadcast_mask(torch.ones(4, 1, dtype=torch.bool), 1, 3).shape
        torch.Size([4, 1, 1])
        >>> broadcast_mask(torch.ones(4, 3, 1, dtype=torch.bool), 1, 3).shape
        torch.Size([4, 3, 1])
    """
    while mask.ndim > batch_ndim and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if mask.ndim > ndim:
        mask = mask.flatten(ndim - 1).any(-1) if ndim > 0 else mask.any()
    if mask.ndim < ndim:
        mask = mask.reshape(*mask.shape, *([1] * (ndim - mask.ndim)))
    return mask
