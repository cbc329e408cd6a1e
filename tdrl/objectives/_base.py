"""LossModule: per-instance keys, value-estimator factory, target-parameter helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase, TensorDictParams
from tensordict.nn import TensorDictModule
from tensordict.utils import NestedKey
from torch import nn

from tdrl.objectives.value import (
    GAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimators,
)

__all__ = ["LossModule", "normalize_key"]

_ESTIMATORS: dict[ValueEstimators, type] = {
    ValueEstimators.TD0: TD0Estimator,
    ValueEstimators.TD1: TD1Estimator,
    ValueEstimators.TDLambda: TDLambdaEstimator,
    ValueEstimators.GAE: GAE,
}


def normalize_key(key: NestedKey) -> NestedKey:
    """``("a",)`` -> ``"a"``; nested tuples are flattened.

    Examples:
        >>> normalize_key(("agents", ("action",)))
        ('agents', 'action')
    """
    flat: list[str] = []

    def _walk(k: Any) -> None:
        if isinstance(k, str):
            flat.append(k)
        else:
            for part in k:
                _walk(part)

    _walk(key)
    return flat[0] if len(flat) == 1 else tuple(flat)


class LossModule(nn.Module):
    """Base class of tdrl losses.

    A loss reads a batch (never modifying it) and returns a TensorDict of ``loss_*`` terms (sum
    them to backpropagate) plus detached diagnostics. Subclasses declare:

    - ``Keys``: a frozen dataclass of the data keys they read and write (per instance: change them
      with ``set_keys``);
    - ``default_value_estimator`` and ``_value_network_for_estimator()`` when they use one;
    - networks as submodules, and targets with ``_make_target(name)``.

    Examples:
        >>> import dataclasses
        >>> class Half(LossModule):
        ...     @dataclasses.dataclass(frozen=True)
        ...     class Keys:
        ...         value: str = "value"
        ...     def forward(self, td):
        ...         return TensorDict({"loss_half": td[self.tensor_keys.value].mean() / 2}, [])
        >>> loss = Half().set_keys(value=("agents", "value"))
        >>> loss.tensor_keys.value
        ('agents', 'value')
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """The data keys a loss reads and writes (overridden by each loss)."""

    default_value_estimator: ClassVar[ValueEstimators | None] = None
    estimator_key_names: ClassVar[tuple[str, ...]] = (
        "advantage",
        "value_target",
        "value",
        "reward",
        "done",
        "terminated",
    )

    def __init__(self) -> None:
        super().__init__()
        self._keys = type(self).Keys()
        self._value_estimator: nn.Module | None = None
        self._targets: dict[str, str] = {}

    # ---------------------------------------------------------------- keys
    @property
    def tensor_keys(self) -> Any:
        """This instance's keys (a frozen dataclass)."""
        return self._keys

    def set_keys(self, **keys: NestedKey) -> LossModule:
        """Changes the data keys this loss reads/writes; returns the loss for chaining.

        Raises:
            KeyError: a name that is not one of this loss's key names.
        """
        valid = {f.name for f in dataclasses.fields(self._keys)}
        unknown = sorted(set(keys) - valid)
        if unknown:
            raise KeyError(
                f"{type(self).__name__}.set_keys: unknown key name(s) {unknown} "
                f"(expected one of {sorted(valid)}). Check the spelling."
            )
        self._keys = dataclasses.replace(
            self._keys, **{k: normalize_key(v) for k, v in keys.items()}
        )
        if self._value_estimator is not None:
            self._forward_keys(self._value_estimator)
        return self

    def _forward_keys(self, estimator: nn.Module) -> None:
        mine = {f.name: getattr(self._keys, f.name) for f in dataclasses.fields(self._keys)}
        shared = {k: v for k, v in mine.items() if k in self.estimator_key_names}
        if shared:
            estimator.set_keys(**shared)  # type: ignore[operator]

    # ---------------------------------------------------------------- value estimators
    def _value_network_for_estimator(self) -> TensorDictModule | None:
        """The network the estimator should use to fill missing values (None: values given)."""
        return None

    def _default_hyperparams(self) -> dict[str, Any]:
        return {"gamma": 0.99}

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> LossModule:
        """Builds the value estimator this loss uses (TD0, TD1, TDLambda or GAE).

        Args:
            value_type: the estimator kind (an enum member or its name); the loss's default
                when None.
            **hyperparams: ``gamma``, ``lmbda`` and the estimator's options.

        Returns:
            The loss, for chaining.
        """
        if value_type is None:
            value_type = self.default_value_estimator
        if value_type is None:
            raise ValueError(
                f"{type(self).__name__}.make_value_estimator: this loss uses no value estimator "
                "(got value_type=None and no default)."
            )
        if isinstance(value_type, str):
            try:
                value_type = ValueEstimators[value_type]
            except KeyError:
                raise ValueError(
                    f"{type(self).__name__}.make_value_estimator: unknown estimator "
                    f"{value_type!r} (expected one of {[v.name for v in ValueEstimators]})."
                ) from None
        params = {**self._default_hyperparams(), **hyperparams}
        if value_type in (ValueEstimators.TD0, ValueEstimators.TD1):
            params.pop("lmbda", None)
        else:
            params.setdefault("lmbda", 0.95)
        est = _ESTIMATORS[value_type](value_network=self._value_network_for_estimator(), **params)
        self._value_estimator = est
        self._forward_keys(est)
        return self

    @property
    def value_estimator(self) -> nn.Module:
        """The value estimator (the default one is built on first use)."""
        if self._value_estimator is None:
            self.make_value_estimator()
        assert self._value_estimator is not None
        return self._value_estimator

    # ---------------------------------------------------------------- targets
    def _make_target(self, name: str) -> TensorDictParams:
        """Registers a detached copy of submodule ``name``'s parameters as its target.

        The copy lives in ``self.<name>_target_params`` (buffers: never trained). Use it with
        ``with self.<name>_target_params.to_module(self.<name>): ...``.
        """
        module = getattr(self, name)
        params = TensorDict.from_module(module).detach().clone()
        target = TensorDictParams(params, no_convert=True)
        setattr(self, f"{name}_target_params", target)
        self._targets[name] = f"{name}_target_params"
        return target

    def target_pairs(self) -> Iterator[tuple[TensorDictBase, TensorDictBase]]:
        """Yields ``(live_params, target_params)`` for every network that has a target."""
        for name, attr in self._targets.items():
            yield TensorDict.from_module(getattr(self, name)), getattr(self, attr)

    @torch.no_grad()
    def reset_targets(self) -> None:
        """Copies the live parameters into every target."""
        for live, target in self.target_pairs():
            target.data.update_(live.data)
