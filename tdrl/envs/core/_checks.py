"""The checks EnvBase runs on the data it receives and returns (a mixin of EnvBase)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.core._fast import lookup, truthy
from tdrl.errors import SpecError
from tdrl.specs import Binary, MultiOneHot, OneHot

__all__ = ["EnvChecks", "exact_cast"]


class EnvChecks:
    """Action checks, done filling, done-after-reset, batch and type checks of an env.

    Relies on the attributes EnvBase sets: ``batch_size``, ``batch_locked``, ``device``,
    ``validate``, ``allow_done_after_reset``, the spec accessors and the cached plans
    (``_action_checks``, ``_done_fill``, ``done_groups``, ``action_keys``).
    """

    batch_size: torch.Size
    batch_locked: bool
    device: torch.device | None
    validate: bool
    allow_done_after_reset: bool
    _specs: Any
    _action_checks: list[Any]
    _action_paths: list[Any]
    _done_fill: list[Any]
    _done_paths: list[tuple[str, ...]]
    _done_leaf_paths: list[tuple[str, ...]]
    done_groups: list[Any]
    action_keys: list[Any]
    full_action_spec: Any

    def _type_check(self, td: TensorDictBase, kinds: tuple[str, ...], method: str) -> None:
        for kind in kinds:
            spec = self._specs[kind]
            for key in spec.keys(True, True):
                value = td.get(key, None)
                if value is None:
                    raise SpecError(
                        f"{type(self).__name__}.{method}: {kind} entry {key!r} is missing "
                        f"(available keys: {sorted(map(str, td.keys(True, True)))}). Return "
                        "every spec'd entry from the hook."
                    )
                spec[key].assert_is_in(value, key=key)

    def _check_batch_of(self, tensordict: TensorDictBase, method: str) -> None:
        if tensordict.batch_size == self.batch_size:
            return
        if not self.batch_locked and not self.batch_size:
            return
        raise RuntimeError(
            f"{type(self).__name__}.{method}: the tensordict's batch size is not the env's "
            f"(got {tuple(tensordict.batch_size)}; expected {tuple(self.batch_size)}). Pass data "
            "of the env's batch size (only an env with batch_size=() and batch_locked=False "
            "accepts any batch)."
        )

    def _check_done_after_reset(
        self, td: TensorDictBase, masks: list[torch.Tensor | None] | None
    ) -> None:
        if self.allow_done_after_reset:
            return
        for i, g in enumerate(self.done_groups):
            done = lookup(td, self._done_leaf_paths[i])
            if done is None:
                done = td.get(g.done)  # raises the KeyError naming the key
            if not truthy(done):
                continue
            if masks is not None:
                m = masks[i]
                if m is None:
                    continue
                done = done & m.reshape(done.shape) if m.numel() == done.numel() else done
            if done.any():
                raise RuntimeError(
                    f"{type(self).__name__}.reset: '{g.done}' is still true after a reset "
                    f"(got {int(done.sum())} true entries; expected none where a reset was asked). "
                    "Make _reset return done=False for the reset entries, or build the env with "
                    "allow_done_after_reset=True."
                )

    def _fill_done(self, td: TensorDictBase) -> None:
        if type(td) is TensorDict and _has_all(td, self._done_paths):
            return  # the usual case: the env returned every done leaf
        for done_k, term_k, trunc_k, spec in self._done_fill:
            done = td.get(done_k, None)
            term = td.get(term_k, None)
            if done is None and term is None:
                shape = (*td.batch_size, *spec.shape[len(self.batch_size) :])
                done = term = torch.zeros(shape, dtype=torch.bool, device=self.device)
                td.set(done_k, done)
                td.set(term_k, term)
            elif term is None:
                td.set(term_k, done)
            elif done is None:
                trunc = td.get(trunc_k, None) if trunc_k is not None else None
                td.set(done_k, term if trunc is None else term | trunc)
            if trunc_k is not None and td.get(trunc_k, None) is None:
                td.set(trunc_k, torch.zeros_like(td.get(done_k)))

    def _check_actions(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Checks the actions; returns what the env steps with: ``tensordict`` itself, or a
        shallow copy holding the actions cast to their spec's dtype when a user sent another
        dtype that casts exactly (TorchRL accepts e.g. a float 0/1 one-hot or a float index;
        the caller's data keeps what was written)."""
        if type(tensordict) is TensorDict:
            # Fast pass over the plain data; any doubt goes to the full check below.
            store = tensordict._tensordict
            for path, shape, dtype in self._action_paths:
                value = store.get(path[0]) if len(path) == 1 else lookup(tensordict, path)
                if value is None or value.dtype != dtype or value.shape != shape:
                    break
            else:
                if self.validate:
                    self._validate_actions(tensordict)
                return tensordict
        converted: TensorDictBase | None = None
        for key, shape, dtype in self._action_checks:
            value = tensordict.get(key, None)
            if value is None:
                raise KeyError(
                    f"{type(self).__name__}.step: action key {key!r} is missing "
                    f"(available keys: {sorted(map(str, tensordict.keys(True, True)))}). "
                    "Write the action (e.g. with a policy or env.rand_action(td)) before step."
                )
            if not self.batch_locked and tensordict.batch_size != self.batch_size:
                shape = torch.Size((*tensordict.batch_size, *shape[len(self.batch_size) :]))
            if value.shape == shape and value.dtype == dtype:
                continue
            spec = self.full_action_spec[key]
            cast = exact_cast(value, spec) if value.shape == shape else None
            if cast is None:
                raise SpecError(
                    f"{type(self).__name__}.step: action {key!r} does not match its spec "
                    f"(got shape {tuple(value.shape)} and dtype {value.dtype}; expected shape "
                    f"{tuple(shape)} and dtype {dtype}{_cast_rule(spec)}). "
                    f"{_action_hint(spec, value)}"
                )
            if converted is None:
                converted = tensordict.copy()
            converted.set(key, cast)
        out = tensordict if converted is None else converted
        if self.validate:
            self._validate_actions(out)
        return out

    def _validate_actions(self, tensordict: TensorDictBase) -> None:
        for key in self.action_keys:
            self.full_action_spec[key].assert_is_in(tensordict.get(key), key=key)


_ONE_HOT_LIKE = (OneHot, MultiOneHot, Binary)


def exact_cast(value: torch.Tensor, spec: Any) -> torch.Tensor | None:
    """``value`` cast to the spec's dtype when TorchRL would take it and nothing is lost,
    else ``None``.

    A floating spec takes any real dtype. A discrete spec (integer or bool dtype) takes values
    that survive the cast unchanged (a float ``1.0`` index, a float 0/1 one-hot, an int32
    index); one-hot and binary specs only take 0/1 values.

    Examples:
        >>> from tdrl.specs import OneHot
        >>> exact_cast(torch.tensor([0.0, 1.0]), OneHot(2, dtype=torch.int64)).tolist()
        [0, 1]
        >>> exact_cast(torch.tensor([0.3, 0.7]), OneHot(2, dtype=torch.int64)) is None
        True
    """
    target = spec.dtype
    if value.dtype.is_complex or not isinstance(target, torch.dtype):
        return None
    if target.is_floating_point:
        return None if value.dtype is torch.bool else value.to(target)
    if isinstance(spec, _ONE_HOT_LIKE) and not bool(((value == 0) | (value == 1)).all()):
        return None
    cast = value.to(target)
    return cast if bool((cast.to(value.dtype) == value).all()) else None


def _cast_rule(spec: Any) -> str:
    if getattr(spec.dtype, "is_floating_point", False):
        return ", or another real dtype"
    if isinstance(spec, _ONE_HOT_LIKE):
        return ", or another dtype holding only 0/1"
    return ", or another dtype holding exactly those integers"


def _action_hint(spec: Any, value: torch.Tensor) -> str:
    if isinstance(spec, OneHot) and tuple(value.shape) == tuple(spec.shape[:-1]):
        return (
            "This looks like a categorical index: encode it with "
            "env.full_action_spec[key].encode(index), or build the env with categorical "
            "actions (e.g. categorical_action_encoding=True)."
        )
    return "Produce actions from env.action_spec."


def _has_all(td: TensorDict, paths: list[tuple[str, ...]]) -> bool:
    store = td._tensordict
    for path in paths:
        if (path[0] not in store) if len(path) == 1 else (lookup(td, path) is None):
            return False
    return True
