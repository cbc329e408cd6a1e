"""TensorDictPrimer: entries the env does not produce but the policy needs carried (hidden states)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey, unravel_key

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeyNotFoundError, show_keys
from tdrl.specs import Composite, TensorSpec

__all__ = ["TensorDictPrimer"]

Default = float | int | bool | str | Callable[[TensorSpec], torch.Tensor]


class TensorDictPrimer(Transform):
    """Adds entries that the policy writes and reads but the env never produces.

    The typical use is a recurrent policy's hidden state. The primer's specs go into the
    observation spec and the state spec, so the entries exist right after ``reset``,
    ``step_mdp`` carries ``("next", key)`` back to the root, and batched envs and collectors
    preallocate them from the specs.

    - On reset the default value is written where the entry's ``_reset`` is true (the deepest
      done group whose prefix holds the key, or ``reset_key``); elsewhere the input's value is
      kept.
    - On step, if the policy did not write ``("next", key)``, the root value is carried forward.

    Args:
        primers: a Composite or a dict ``key -> TensorSpec`` (more entries as ``**kwargs``).
        random: draw the reset values from the specs (``spec.rand()``) instead of using
            ``default_value`` (the two cannot be combined).
        default_value: the reset value (``None``: 0.0): a number, ``"random"``, a callable (as in
            TorchRL, called with no argument, or with the batched spec when it takes one) that
            returns a tensor fitting the spec, or a dict ``key -> one of those``.
        reset_key: the ``_reset`` key that resets every entry (default: per entry, the group
            that owns the key).
        expand_specs: the specs are unbatched: expand them to the env's batch size. Without it
            (``None`` or ``False``) every spec must start with the batch size.
        single_default_value: must stay ``False``: one callable building every primer at once
            is not supported (pass a dict of callables).
        call_before_env_reset: must stay ``False``: the primers are written after the env
            below resets, never handed to its reset.
        **kwargs: more primers, ``name=spec``; ``device`` (TorchRL's keyword, not a primer)
            moves the primers' specs, and so the values written, to that device.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.specs import Unbounded
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(
        ...     CountingEnv(batch_size=(2,)),
        ...     TensorDictPrimer(hidden=Unbounded(shape=(4,)), expand_specs=True, default_value=1.0),
        ... )
        >>> td = env.reset()
        >>> td["hidden"].shape, td["hidden"].sum().item()
        (torch.Size([2, 4]), 8.0)
        >>> td["next", "hidden"] = td["hidden"] * 3   # what a recurrent policy does
        >>> env.step(env.rand_action(td))["next", "hidden"][0].tolist()
        [3.0, 3.0, 3.0, 3.0]
    """

    def __init__(
        self,
        primers: Composite | Mapping[str, Any] | None = None,
        random: bool | None = None,
        default_value: Default | Mapping[NestedKey, Default] | None = None,
        reset_key: NestedKey | None = None,
        expand_specs: bool | None = None,
        single_default_value: bool = False,
        call_before_env_reset: bool = False,
        **kwargs: TensorSpec,
    ) -> None:
        for name, flag in (
            ("single_default_value", single_default_value),
            ("call_before_env_reset", call_before_env_reset),
        ):
            if flag:
                raise NotImplementedError(
                    f"TensorDictPrimer.__init__: {name} is not supported (got {name}={flag!r}; "
                    f"expected False). Drop {name}; pass default_value as a dict of callables."
                )
        if random and default_value is not None:
            raise ValueError(
                f"TensorDictPrimer.__init__: random and default_value exclude each other (got "
                f"random=True, default_value={default_value!r}; expected one of them). Drop one."
            )
        if random:
            default_value = "random"
        elif default_value is None:
            default_value = 0.0
        # TorchRL's device keyword (not a primer): the primers' specs, and so their values, go
        # there
        device: Any = kwargs.pop("device", None)
        super().__init__()
        self.random = bool(random)
        items: list[tuple[Any, Any]] = []
        if isinstance(primers, Composite):
            items += list(primers.items(True, True))
        elif primers is not None:
            items += list(primers.items())
        items += list(kwargs.items())
        self.primers: dict[NestedKey, TensorSpec] = {}
        for key, spec in items:
            if not isinstance(spec, TensorSpec) or isinstance(spec, Composite):
                raise TypeError(
                    f"TensorDictPrimer.__init__: primer {key!r} is not a leaf spec (got "
                    f"{type(spec).__name__}; expected e.g. Unbounded(shape=(8,))). Pass specs."
                )
            self.primers[unravel_key(key)] = spec if device is None else spec.to(device)
        if isinstance(default_value, Mapping):
            self._defaults = {unravel_key(k): v for k, v in default_value.items()}
            unknown = set(self._defaults) - set(self.primers)
            if unknown:
                raise KeyNotFoundError(
                    f"TensorDictPrimer.__init__: default_value names keys without a primer (got "
                    f"{sorted(map(str, unknown))}; available keys: {show_keys(self.primers)})."
                    " Fix the keys of default_value."
                )
            missing = set(self.primers) - set(self._defaults)
            if missing:
                raise ValueError(
                    f"TensorDictPrimer.__init__: default_value misses primers (got no value for "
                    f"{sorted(map(str, missing))}; expected one per primer, as in TorchRL). Add them."
                )
        else:
            self._defaults = {k: default_value for k in self.primers}
        for key, value in self._defaults.items():
            _check_default(key, value)
        self.expand_specs = bool(expand_specs)
        self.reset_key = unravel_key(reset_key) if reset_key is not None else None
        self.out_keys = list(self.primers)
        self._specs: dict[NestedKey, TensorSpec] = {}

    def _bind(self, parent: EnvBase) -> None:
        batch = tuple(parent.batch_size)
        self._specs = {}
        for key, spec in self.primers.items():
            if self.expand_specs:
                spec = spec.expand(*batch, *spec.shape)
            elif tuple(spec.shape[: len(batch)]) != batch:
                raise ValueError(
                    f"TensorDictPrimer: the spec of {key!r} does not start with the env batch "
                    f"size (got shape {tuple(spec.shape)}; expected leading dims {batch}). Pass "
                    "expand_specs=True for unbatched specs, or shape them (*batch_size, ...)."
                )
            self._specs[key] = spec
        if self.reset_key is not None and self.reset_key not in parent.reset_keys:
            raise KeyNotFoundError(
                f"TensorDictPrimer: reset_key {self.reset_key!r} is not a reset key of the env "
                f"(available keys: {show_keys(parent.reset_keys)}). Pass one of them or None."
            )

    def _add(self, spec: Composite, kind: str) -> Composite:
        for key, leaf in self._specs.items():
            if key in spec:
                raise KeyNotFoundError(
                    f"TensorDictPrimer.transform_{kind}_spec: key {key!r} is already in the env's "
                    f"{kind} spec (available keys: {show_keys(spec)}). Prime another key."
                )
            spec[key] = leaf
        return spec

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._add(observation_spec, "observation")

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._add(state_spec, "state")

    def _default(self, key: NestedKey, spec: TensorSpec) -> torch.Tensor:
        value = self._defaults[key]
        if isinstance(value, str):
            out = spec.rand()
        elif callable(value):
            made = value() if _takes_no_argument(value) else value(spec)  # type: ignore[call-arg]
            out = torch.as_tensor(made, device=spec.device).to(spec.dtype)
            if out.shape != spec.shape:
                try:
                    out = out.expand(spec.shape).clone()
                except RuntimeError as err:
                    raise ValueError(
                        f"TensorDictPrimer: default_value for {key!r} returned the wrong shape "
                        f"(got {tuple(out.shape)}; expected {tuple(spec.shape)}). Return a "
                        "tensor of the spec's shape."
                    ) from err
        else:
            out = torch.full(spec.shape, value, dtype=spec.dtype, device=spec.device)
        return out  # type: ignore[no-any-return]

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        for key, spec in self._specs.items():
            value = self._default(key, spec)
            tensordict_out.set(
                key, self._where_reset(tensordict_in, key, value, reset_key=self.reset_key)
            )
        return tensordict_out

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        for key in self._specs:
            if next_tensordict.get(key, None) is not None:
                continue
            value = tensordict.get(key, None)
            if value is None:
                raise self._missing_key(key, tensordict, "_step")
            next_tensordict.set(key, value)
        return next_tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Fills the primers missing from ``tensordict`` (its root) with their default value.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from tdrl.specs import Unbounded
            >>> t = TensorDictPrimer(h=Unbounded(shape=(3,)), expand_specs=True)
            >>> t(TensorDict(batch_size=[5]))["h"].shape
            torch.Size([5, 3])
        """
        batch = tuple(tensordict.batch_size)
        for key, spec in self.primers.items():
            if tensordict.get(key, None) is not None:
                continue
            if tuple(spec.shape[: len(batch)]) != batch or self.expand_specs:
                spec = spec.expand(*batch, *spec.shape)
            tensordict.set(key, self._default(key, spec))
        return tensordict

    def extra_repr(self) -> str:
        return f"primers={show_keys(self.primers)}, expand_specs={self.expand_specs}"


def _check_default(key: NestedKey, value: Any) -> None:
    ok = (
        isinstance(value, (int, float, bool))
        or value == "random"
        or (callable(value) and not isinstance(value, str))
    )
    if not ok:
        raise TypeError(
            f"TensorDictPrimer.__init__: default_value for {key!r} is not supported (got "
            f"{value!r}; expected a number, 'random', or a callable spec -> tensor). Fix it."
        )


def _takes_no_argument(func: Callable[..., Any]) -> bool:
    """TorchRL calls a default_value callable with no argument; tdrl's may take the spec."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    required = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return not any(p.kind in required and p.default is inspect.Parameter.empty for p in params)
