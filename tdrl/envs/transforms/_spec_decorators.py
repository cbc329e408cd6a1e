"""TorchRL's spec-hook decorators for custom transforms: ``_apply_to_composite`` and
``_apply_to_composite_inv`` (TorchRL users import them from ``...transforms.transforms``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tdrl.specs import Composite, TensorSpec

__all__ = ["_apply_to_composite", "_apply_to_composite_inv"]

LeafHook = Callable[[Any, TensorSpec], TensorSpec]


def _apply_to_composite(function: LeafHook) -> Callable[[Any, Any], Any]:
    """Turns a per-leaf spec hook into one taking the whole Composite (TorchRL's decorator).

    The decorated ``transform_observation_spec`` (or ``transform_reward_spec``, ...) gets the
    Composite; for each ``in_key -> out_key`` pair whose ``in_key`` it holds, ``out_key``
    becomes ``function(self, <a copy of the in_key leaf>)``. A leaf given directly goes to
    ``function`` as it is.

    Examples:
        >>> import torch
        >>> from tdrl.envs.transforms import Transform
        >>> from tdrl.specs import Bounded, Unbounded
        >>> class Sin(Transform):
        ...     def _apply_transform(self, obs):
        ...         return obs.sin()
        ...     @_apply_to_composite
        ...     def transform_observation_spec(self, observation_spec):
        ...         return Bounded(-1.0, 1.0, shape=observation_spec.shape)
        >>> spec = Composite(th=Unbounded(shape=(1,)))
        >>> out = Sin(in_keys=["th"], out_keys=["sin"]).transform_observation_spec(spec)
        >>> sorted(out.keys()), type(out["sin"]).__name__
        (['sin', 'th'], 'Bounded')
    """

    @functools.wraps(function)
    def new_fun(self: Any, spec: Any) -> Any:
        if not isinstance(spec, Composite):
            return function(self, spec)
        leaves = set(spec.keys(True, True))
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            if in_key in leaves:
                spec[out_key] = function(self, spec[in_key].clone())
        return spec

    return new_fun


def _apply_to_composite_inv(function: LeafHook) -> Callable[[Any, Any], Any]:
    """The inverse side of :func:`_apply_to_composite` (TorchRL's decorator).

    Decorates ``transform_input_spec`` (its Composite holds ``full_action_spec`` and
    ``full_state_spec``) or ``transform_action_spec``/``transform_state_spec`` (the Composite
    of those leaves): for each ``in_key_inv -> out_key_inv`` pair, the leaf the env below
    reads (``in_key_inv``) is replaced by ``function(self, <its copy>)`` under the name the
    user writes (``out_key_inv``).

    Examples:
        >>> from tdrl.envs.transforms import Transform
        >>> from tdrl.specs import Bounded
        >>> class Half(Transform):
        ...     def _inv_apply_transform(self, action):
        ...         return action * 0.5
        ...     @_apply_to_composite_inv
        ...     def transform_input_spec(self, action_spec):
        ...         return Bounded(-2.0, 2.0, shape=action_spec.shape)
        >>> inp = Composite(full_action_spec=Composite(action=Bounded(-1.0, 1.0, shape=(1,))),
        ...                 full_state_spec=Composite())
        >>> Half(in_keys_inv=["action"]).transform_input_spec(inp)["full_action_spec", "action"].high
        tensor([2.])
    """

    @functools.wraps(function)
    def new_fun(self: Any, spec: Any) -> Any:
        if not isinstance(spec, Composite):
            return function(self, spec)
        if "full_action_spec" in spec.keys() or "full_state_spec" in spec.keys():
            for name in ("full_action_spec", "full_state_spec"):
                if name in spec.keys():
                    spec[name] = _map_inv(self, function, spec[name].exclude())
            return spec
        return _map_inv(self, function, spec)

    return new_fun


def _map_inv(self: Any, function: LeafHook, spec: Composite) -> Composite:
    leaves = set(spec.keys(True, True))
    for in_key, out_key in zip(self.in_keys_inv, self.out_keys_inv):
        if in_key in leaves:
            new = function(self, spec[in_key].clone())
            if in_key != out_key:
                del spec[in_key]
            spec[out_key] = new
    return spec
