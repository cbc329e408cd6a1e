"""``step_mdp``: build the next root TensorDict from ``td["next"]``.

It runs on every env step, so the exclusion plan is built once (per env, or per call of the free
function) and the copy walks the data without re-deriving keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict import utils as _td_utils
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.envs.core._keys import key_tuple

__all__ = ["StepMDP", "step_mdp"]

_ExclTree = dict[str, Any]  # a key maps to True (drop it) or to a nested tree


def _build_tree(keys: Sequence[NestedKey]) -> _ExclTree:
    tree: _ExclTree = {}
    for key in keys:
        node = tree
        *head, leaf = key_tuple(key)
        for part in head:
            child = node.get(part)
            if child is True:
                break
            node = node.setdefault(part, {})
        else:
            node[leaf] = True
    return tree


def _is_plain_td(value: Any) -> bool:
    return type(value) is TensorDict


def _copy_excluding(src: TensorDictBase, tree: _ExclTree) -> TensorDictBase:
    """Shallow copy of ``src`` (new nodes, shared tensors) without the keys of ``tree``."""
    if type(src) is not TensorDict:
        # another collection (a lazy stack, a subclass) copies itself: new nodes, so dropping
        # keys, nested ones included, leaves the input alone
        copied = src.copy()
        present = copied.keys(include_nested=True)
        drop = [key for key in _tree_keys(tree) if key in present]
        return copied.exclude(*drop, inplace=True) if drop else copied
    out: dict[Any, Any] = {}
    # Hot path: a plain TensorDict's entries are read from its dict directly (the public
    # accessors cost ~10x more per key here), and a plain tensor is known to be a leaf without
    # the abstract-class isinstance check (~0.2 us per entry).
    for key, value in src._tensordict.items():
        sub = tree.get(key)
        if sub is True:
            continue
        if type(value) is not Tensor and _is_node(value):
            value = _copy_excluding(value, sub or {})
        out[key] = value
    return _wrap(out, src._batch_size, src._device)


def _wrap(entries: dict[str, Any], batch_size: torch.Size, device: Any) -> TensorDict:
    """``TensorDict._new_unsafe(entries, batch_size=, device=, nested=False)`` for a device
    that is None or a ``torch.device``: the same object (the test pins its attributes), set up
    without the compile and device probes that cost ~0.5 us per node."""
    if _td_utils._CHECK_INVARIANTS or torch.compiler.is_compiling():
        # tensordict's debug mode checks what _new_unsafe builds; under torch.compile
        # _new_unsafe builds through the constructor, which dynamo traces.
        return TensorDict._new_unsafe(entries, batch_size=batch_size, device=device, nested=False)
    td = _new_object(TensorDict)
    td._device = device
    td._tensordict = entries
    td._batch_size = batch_size
    td._td_dim_names = None
    return td


_new_object = object.__new__


def _tree_keys(tree: _ExclTree, prefix: tuple[str, ...] = ()) -> list[NestedKey]:
    """The keys that ``tree`` drops, as nested keys (a string at the top)."""
    keys: list[NestedKey] = []
    for name, sub in tree.items():
        path = (*prefix, name)
        keys += [path if prefix else name] if sub is True else _tree_keys(sub, path)
    return keys


def _is_node(value: Any) -> bool:
    """A tensordict whose entries are copied one by one (not a non-tensor leaf)."""
    return type(value) is TensorDict or (
        isinstance(value, TensorDictBase) and not _is_leaf_collection(value)
    )


def _is_leaf_collection(value: TensorDictBase) -> bool:
    # NonTensorData / NonTensorStack behave like leaves.
    return type(value).__name__ in ("NonTensorData", "NonTensorStack")


def _fill_missing(dest: TensorDictBase, src: TensorDictBase, tree: _ExclTree) -> None:
    """Adds to ``dest`` the entries of ``src`` it lacks, except the keys of ``tree``."""
    plain = _is_plain_td(src) and _is_plain_td(dest)
    items = src._tensordict.items() if plain else src.items()
    for key, value in items:
        sub = tree.get(key)
        if sub is True:
            continue
        is_node = type(value) is not Tensor and _is_node(value)
        present = dest._tensordict.get(key) if plain else dest.get(key, None)
        if present is None:
            dest.set(key, _copy_excluding(value, sub or {}) if is_node else value)  # type: ignore[arg-type]
        elif is_node and type(present) is not Tensor and _is_node(present):
            _fill_missing(present, value, sub or {})  # type: ignore[arg-type]


class StepMDP:
    """A precomputed ``step_mdp`` plan for fixed reward/done/action keys.

    Args:
        reward_keys: reward leaves (dropped from the next root when ``exclude_reward``).
        done_keys: done leaves (dropped when ``exclude_done``).
        action_keys: action leaves (dropped when ``exclude_action``).
        keep_other: carry root entries that ``"next"`` lacks (policy outputs, hidden states).
        exclude_reward: drop the rewards. exclude_done: drop the done leaves.
        exclude_action: drop the actions (at the root and under ``"next"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> plan = StepMDP(reward_keys=["reward"], done_keys=["done"], action_keys=["action"])
        >>> td = TensorDict(
        ...     {"obs": torch.zeros(2), "action": torch.ones(2), "hidden": torch.ones(2),
        ...      "next": {"obs": torch.ones(2), "reward": torch.ones(2), "done": torch.zeros(2)}},
        ...     batch_size=[2])
        >>> sorted(plan(td).keys())
        ['done', 'hidden', 'obs']
    """

    def __init__(
        self,
        *,
        reward_keys: Sequence[NestedKey] = ("reward",),
        done_keys: Sequence[NestedKey] = ("done", "terminated", "truncated"),
        action_keys: Sequence[NestedKey] = ("action",),
        keep_other: bool = True,
        exclude_reward: bool = True,
        exclude_done: bool = False,
        exclude_action: bool = True,
    ) -> None:
        # As in TorchRL, an excluded key is dropped wherever it is: at the root and under
        # "next" (an action a policy or a transform wrote under "next" is not carried either).
        next_drop: list[NestedKey] = []
        if exclude_reward:
            next_drop += list(reward_keys)
        if exclude_done:
            next_drop += list(done_keys)
        if exclude_action:
            next_drop += list(action_keys)
        root_drop: list[NestedKey] = ["next", *next_drop]
        self.keep_other = keep_other
        # without keep_other, kept actions are still carried (TorchRL), unless "next" holds
        # them (TorchRL copies the root first and "next" over it)
        self._carried_actions = [] if keep_other or exclude_action else list(action_keys)
        self._next_tree = _build_tree(next_drop)
        self._root_tree = _build_tree(root_drop)
        self._plans: dict[tuple[Any, ...], _Plan] = {}

    def __call__(
        self, tensordict: TensorDictBase, next_tensordict: TensorDictBase | None = None
    ) -> TensorDictBase:
        """Returns the next root; writes into ``next_tensordict`` when one is given."""
        plain = type(tensordict) is TensorDict
        nxt = tensordict._tensordict.get("next") if plain else tensordict.get("next", None)
        if type(nxt) is not TensorDict:  # the plain case skips the abstract-class check
            if nxt is None:
                raise KeyError(
                    "step_mdp: the tensordict has no 'next' entry "
                    f"(available keys: {sorted(map(str, tensordict.keys()))}). "
                    "Call env.step(td) before step_mdp."
                )
            if not isinstance(nxt, TensorDictBase):
                raise TypeError(
                    f"step_mdp: 'next' must be a TensorDict (got {type(nxt).__name__})."
                )
        if not self.keep_other:
            # "next" alone: the per-layout plan of _merge would only add work here
            out = _copy_excluding(nxt, self._next_tree)
        elif plain and _same_layout(tensordict, nxt):
            out = self._merge(nxt, tensordict, self._next_tree, self._root_tree)
        else:
            out = _copy_excluding(nxt, self._next_tree)
            _fill_missing(out, tensordict, self._root_tree)
        for key in self._carried_actions:
            action = tensordict.get(key, None)
            if action is not None and out.get(key, None) is None:
                out.set(key, action)
        if next_tensordict is not None:
            next_tensordict.update(out)
            return next_tensordict
        return out

    def __getstate__(self) -> dict[str, Any]:
        # the plans are keyed by the ids of this object's trees: a copy starts without them
        return {**self.__dict__, "_plans": {}}

    def _merge(
        self, nxt: TensorDict, root: TensorDict | None, next_tree: _ExclTree, root_tree: _ExclTree
    ) -> TensorDict:
        """The fast path of ``_copy_excluding`` + ``_fill_missing`` for two plain nodes of the
        same batch size and device: the kept keys of each layout are worked out once (a plan
        per pair of key sets), then the output dict is filled and wrapped once."""
        nstore = nxt._tensordict
        rstore = None if root is None else root._tensordict
        layout = (
            id(next_tree),
            id(root_tree),
            tuple(nstore),
            None if rstore is None else tuple(rstore),
        )
        plan = self._plans.get(layout)
        if plan is None:
            plan = _Plan(nstore, rstore, next_tree, root_tree)
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            self._plans[layout] = plan
        out: dict[str, Any] = {}
        for key, nsub, rsub in plan.from_next:
            value = nstore[key]
            if type(value) is TensorDict:
                other = rstore.get(key) if rsub is not None else None  # type: ignore[union-attr]
                if rsub is not None and _same_layout(other, value):
                    value = self._merge(value, other, nsub, rsub)
                else:
                    value = _copy_excluding(value, nsub)
                    if rsub is not None and isinstance(other, TensorDictBase):
                        if not _is_leaf_collection(other):
                            _fill_missing(value, other, rsub)
            elif type(value) is not Tensor and _is_node(value):
                value = _copy_excluding(value, nsub)
            out[key] = value
        for key, rsub in plan.from_root:
            value = rstore[key]  # type: ignore[index]
            if type(value) is not Tensor and _is_node(value):
                value = _copy_excluding(value, rsub)
            out[key] = value
        return _wrap(out, nxt._batch_size, nxt._device)


_MAX_PLANS = 64


class _Plan:
    """Which keys of a next node (with their exclusion subtrees) and of the root node go to the
    output, for one pair of key layouts (what ``_copy_excluding`` and ``_fill_missing`` keep)."""

    __slots__ = ("from_next", "from_root")

    def __init__(
        self, nstore: Any, rstore: Any, next_tree: _ExclTree, root_tree: _ExclTree
    ) -> None:
        self.from_next: list[tuple[str, _ExclTree, _ExclTree | None]] = []
        for key in nstore:
            sub = next_tree.get(key)
            if sub is True:
                continue
            # the root node's entries fill a next node only when the root holds that node
            rsub = root_tree.get(key, {}) if rstore is not None and key in rstore else None
            self.from_next.append((key, sub or {}, None if rsub is True else rsub))
        self.from_root: list[tuple[str, _ExclTree]] = []
        if rstore is not None:
            for key in rstore:
                sub = root_tree.get(key)
                if sub is not True and key not in nstore:
                    self.from_root.append((key, sub or {}))


def _same_layout(a: Any, b: Any) -> bool:
    """Both plain TensorDicts of one batch size and device (what the fast merge needs)."""
    return (
        type(a) is TensorDict
        and type(b) is TensorDict
        and a._batch_size == b._batch_size
        and a._device == b._device
    )


def _as_key_list(keys: NestedKey | Sequence[NestedKey]) -> list[NestedKey]:
    # A str or a tuple of str is one (nested) key, as in tensordict; a list holds several keys.
    if isinstance(keys, str) or (isinstance(keys, tuple) and all(isinstance(k, str) for k in keys)):
        return [keys]
    return list(keys)


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: NestedKey | Sequence[NestedKey] = "reward",
    done_keys: NestedKey | Sequence[NestedKey] = "done",
    action_keys: NestedKey | Sequence[NestedKey] = "action",
) -> TensorDictBase:
    """Builds the root TensorDict of the next step from ``tensordict["next"]`` (TorchRL's).

    The result holds every entry of ``"next"`` except the ``reward_keys`` (unless
    ``exclude_reward=False``) and the ``done_keys`` (only with ``exclude_done=True``) and, with
    ``keep_other``, the root entries that ``"next"`` lacks. The ``action_keys`` are dropped from
    both (an action written under ``"next"`` is not carried either) unless
    ``exclude_action=False``, in which case the actions are kept even without ``keep_other``
    (an action under ``"next"`` wins over the root one, as in TorchRL).
    Only the keys named are excluded: with the default ``done_keys="done"``,
    ``exclude_done=True`` drops ``"done"`` and keeps ``"terminated"``/``"truncated"``. The input
    is never modified. This free function looks its key plan up in a cache keyed by its
    arguments at each call; envs keep a precomputed one (with all their own keys): prefer
    ``env.step_mdp(td)`` in loops.

    Args:
        tensordict: a stepped TensorDict (it holds ``"next"``).
        next_tensordict: if given, the result is written into it.
        keep_other: keep root entries that are not actions, rewards or done leaves.
        exclude_reward: drop the reward keys.
        exclude_done: drop the done keys.
        exclude_action: drop the action keys.
        reward_keys: a key or a list of keys (default ``"reward"``). A tuple of strings is one
            nested key; pass several keys as a list.
        done_keys: same, default ``"done"``.
        action_keys: same, default ``"action"``.

    Returns:
        The next root TensorDict.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(
        ...     {"obs": torch.zeros(3), "action": torch.ones(3),
        ...      "next": {"obs": torch.ones(3), "reward": torch.ones(3), "done": torch.zeros(3)}},
        ...     batch_size=[3])
        >>> nxt = step_mdp(td)
        >>> sorted(nxt.keys()), nxt["obs"].tolist()
        (['done', 'obs'], [1.0, 1.0, 1.0])
        >>> sorted(step_mdp(td, keep_other=False, exclude_action=False).keys())
        ['action', 'done', 'obs']
    """
    try:  # the plan of these arguments, built once; this lookup runs on every call, so the
        # key is one flat tuple. A list of keys and a tuple naming one nested key must not share
        # an entry: a list is tagged with the type ``list`` itself, which no key can be.
        cache_key: Any = (
            keep_other,
            exclude_reward,
            exclude_done,
            exclude_action,
            (list, *reward_keys) if isinstance(reward_keys, list) else reward_keys,
            (list, *done_keys) if isinstance(done_keys, list) else done_keys,
            (list, *action_keys) if isinstance(action_keys, list) else action_keys,
        )
        plan = _FREE_PLANS.get(cache_key)
    except TypeError:  # unhashable keys: no caching
        cache_key, plan = None, None
    if plan is None:
        plan = StepMDP(
            reward_keys=_as_key_list(reward_keys),
            done_keys=_as_key_list(done_keys),
            action_keys=_as_key_list(action_keys),
            keep_other=keep_other,
            exclude_reward=exclude_reward,
            exclude_done=exclude_done,
            exclude_action=exclude_action,
        )
        if cache_key is not None:
            if len(_FREE_PLANS) >= _MAX_PLANS:
                _FREE_PLANS.clear()
            _FREE_PLANS[cache_key] = plan
    return plan(tensordict, next_tensordict)


_FREE_PLANS: dict[Any, StepMDP] = {}
