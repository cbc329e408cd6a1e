"""Key checks of the transforms, and the agreement check between their specs and their data.

``check_transform_output`` runs on the first reset and the first step after a TransformedEnv
built its specs, so a transform whose spec hook disagrees with its data hook fails with an error
that names it, instead of a shape error far away; the hot path never pays for it afterwards.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.transforms._utils import KeyNotFoundError, leaf_keys, show_keys
from tdrl.errors import SpecError
from tdrl.specs import Composite, NonTensor, TensorSpec

__all__ = ["apply_outside", "check_keys_in_specs", "check_transform_output"]


def check_keys_in_specs(transform: Any, parent: Any) -> None:
    """Raises a ``KeyError`` (naming the transform, the key and the available keys) when a key
    the transform reads is in none of the specs of the env below it."""
    produced = leaf_keys(
        parent.full_observation_spec,
        parent.full_reward_spec,
        parent.full_done_spec,
        parent.full_state_spec,
    )
    inputs = leaf_keys(parent.full_action_spec, parent.full_state_spec)
    for attr, keys, avail in (
        ("in_keys", transform.in_keys, produced),
        ("in_keys_inv", transform.in_keys_inv, inputs),
    ):
        for key in keys:
            if key not in avail:
                raise KeyNotFoundError(
                    f"{type(transform).__name__}.{attr}: key {key!r} is not in the specs of the "
                    f"env below this transform (got {attr}={keys}; available keys: "
                    f"{show_keys(avail)}). Fix the key, or place the transform after the one "
                    "that creates it."
                )


def apply_outside(transform: Any, tensordict: TensorDictBase) -> TensorDictBase:
    """``Transform.forward``: the map on the keys as given, looked up in ``tensordict`` itself.

    As in TorchRL, ``"observation"`` names the root entry only; the entry under ``"next"`` is
    mapped when named (``("next", "observation")``). Every input is read before any output is
    written, so an entry is never mapped twice (``in_keys=["a", "b"], out_keys=["b", "c"]``
    maps the original ``"b"``).
    """
    keys = transform.in_keys
    if transform._maps_tensors():
        values = []
        for key in keys:
            value = tensordict.get(key, None)
            if value is None:
                raise transform._missing_key(key, tensordict, "forward")
            values.append(value)
        for (_, out_key), value in zip(transform._paired("forward"), values):
            tensordict.set(out_key, transform._apply_transform(value))
        return tensordict
    if keys and not transform._holds(tensordict, keys, "forward"):
        raise transform._missing_key(keys[0], tensordict, "forward")
    return transform._call(tensordict)  # type: ignore[no-any-return]


Specs = dict[str, Composite]


def _leaves(specs: Specs, kinds: tuple[str, ...]) -> dict[NestedKey, TensorSpec]:
    out: dict[NestedKey, TensorSpec] = {}
    for kind in kinds:
        for key in leaf_keys(specs[kind]):
            out.setdefault(key, specs[kind][key])
    return out


def check_transform_output(
    name: str,
    data: TensorDictBase,
    keys_before: set[NestedKey],
    before: Specs,
    after: Specs,
    kinds: tuple[str, ...],
    written: list[NestedKey],
    lead: tuple[int, ...] = (),
) -> None:
    """Compares the entries a transform changed in its specs with the data it produced.

    Args:
        name: ``"<Transform>.<hook>"`` for the messages.
        data: the data after the transform's hook.
        keys_before: leaf keys of the data before the hook.
        before: the specs of the env below the transform.
        after: the specs once the transform's spec hooks ran.
        kinds: which spec kinds the data must follow (e.g. observation and done on reset).
        written: the transform's ``out_keys`` (checked even when their spec leaf is unchanged).
        lead: extra leading dims of the data (a batch-unlocked env given batched data).

    Raises:
        SpecError: a declared entry is missing or has another shape/dtype, an entry the spec
            removed is still there, or the hook wrote an entry no spec declares.
    """
    old, new = _leaves(before, kinds), _leaves(after, kinds)
    every = set(_leaves(after, ("observation", "reward", "done", "state", "action")))
    keys_after = {k for k in data.keys(True, True)}
    for key, spec in new.items():
        if old.get(key) is spec and key not in written:
            continue
        value = data.get(key, None)
        if value is None:
            raise SpecError(
                f"{name}: the transform's spec declares {key!r} but its data lacks it (available "
                f"keys: {show_keys(data)}). Make the data hook write every entry the spec hook "
                "declares."
            )
        if isinstance(value, torch.Tensor) and not isinstance(spec, NonTensor):
            shape = (*lead, *spec.shape)
            if tuple(value.shape) != shape or value.dtype != spec.dtype:
                raise SpecError(
                    f"{name}: the data of {key!r} disagrees with the transform's spec (got shape "
                    f"{tuple(value.shape)} and dtype {value.dtype}; expected shape "
                    f"{shape} and dtype {spec.dtype}; available keys: "
                    f"{show_keys(data)}). Make the spec hook mirror the data hook."
                )
    for key in old.keys() - new.keys():
        if key in keys_after and key not in every:
            raise SpecError(
                f"{name}: the transform's spec removes {key!r} but its data still holds it "
                f"(available keys: {show_keys(data)}). Delete the entry in the data hook too."
            )
    for key in keys_after - keys_before - every:
        raise SpecError(
            f"{name}: the transform writes {key!r}, which no spec declares (available spec "
            f"keys: {show_keys(every)}). Declare it in a transform_*_spec hook."
        )
