"""Casts: DTypeCastTransform, DoubleToFloat and DeviceCastTransform."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Composite, TensorSpec

__all__ = ["DTypeCastTransform", "DeviceCastTransform", "DoubleToFloat"]


def _keys_of_dtype(dtype: torch.dtype, *specs: Composite) -> list[NestedKey]:
    out: list[NestedKey] = []
    for spec in specs:
        for key, leaf in spec.items(True, True):
            if getattr(leaf, "dtype", None) == dtype and key not in out:
                out.append(key)
    return out


class DTypeCastTransform(Transform):
    """Casts entries from ``dtype_in`` to ``dtype_out``; actions go back to ``dtype_in``.

    ``in_keys`` (observations, rewards) are cast to ``dtype_out``; ``in_keys_inv`` (actions,
    states the env reads) are exposed as ``dtype_out`` and cast back to ``dtype_in`` before the
    env steps. With ``None``, the keys are every entry of ``dtype_in`` in the env's observation
    and reward specs (resp. action and state specs); outside an env, every tensor of
    ``dtype_in``. Bounds are kept (cast).

    Args:
        dtype_in: the env's dtype.
        dtype_out: the dtype the user sees.
        in_keys: entries to cast forward (``None``: all of ``dtype_in``).
        out_keys: where the cast entries go (default ``in_keys``; needs explicit ``in_keys``).
        in_keys_inv: inputs to cast back (``None``: all of ``dtype_in``).
        out_keys_inv: the names the user writes (default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), DTypeCastTransform(torch.float64, torch.float16))
        >>> env.full_observation_spec["obs64"].dtype, env.full_action_spec["force"].dtype
        (torch.float16, torch.float16)
        >>> env.rand_step()["next", "obs64"].dtype
        torch.float16
    """

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        name = type(self).__name__
        for keys, outs, what in ((in_keys, out_keys, ""), (in_keys_inv, out_keys_inv, "_inv")):
            if keys is None and outs is not None:
                raise ValueError(
                    f"{name}.__init__: out_keys{what} needs in_keys{what} (got in_keys{what}=None, "
                    f"out_keys{what}={outs}; expected explicit in_keys{what}). The order of the "
                    f"entries found by dtype is not defined: pass in_keys{what} too."
                )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dtype_in = dtype_in
        self.dtype_out = dtype_out
        self._auto = in_keys is None
        self._auto_inv = in_keys_inv is None

    def _bind(self, parent: EnvBase) -> None:
        if self._auto:
            keys = _keys_of_dtype(
                self.dtype_in, parent.full_observation_spec, parent.full_reward_spec
            )
            self.in_keys, self.out_keys = keys, list(keys)
        if self._auto_inv:
            keys = _keys_of_dtype(self.dtype_in, parent.full_action_spec, parent.full_state_spec)
            self.in_keys_inv, self.out_keys_inv = keys, list(keys)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_out)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype_in)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec.to(self.dtype_out)

    def _inv_transform_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec.to(self.dtype_out)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Casts the ``in_keys`` (or, when they were never set, every ``dtype_in`` tensor)."""
        if self._auto and not self.in_keys:
            for key, value in list(tensordict.items(True, True)):
                if isinstance(value, torch.Tensor) and value.dtype == self.dtype_in:
                    tensordict.set(key, value.to(self.dtype_out))
            return tensordict
        return super().forward(tensordict)

    def extra_repr(self) -> str:
        return f"dtype_in={self.dtype_in}, dtype_out={self.dtype_out}, {super().extra_repr()}"


class DoubleToFloat(DTypeCastTransform):
    """``DTypeCastTransform(torch.float64, torch.float32)``: float64 envs seen as float32.

    Args:
        in_keys: entries to cast (``None``: every float64 observation and reward).
        out_keys: where the cast entries go (default ``in_keys``).
        in_keys_inv: inputs cast back to float64 (``None``: every float64 action and state).
        out_keys_inv: the names the user writes (default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), DoubleToFloat())
        >>> td = env.rand_step()
        >>> td["force"].dtype, td["next", "obs64"].dtype
        (torch.float32, torch.float32)
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        super().__init__(torch.float64, torch.float32, in_keys, out_keys, in_keys_inv, out_keys_inv)


class DeviceCastTransform(Transform):
    """Moves the env's data (and specs) to ``device``; actions go back to the env's device.

    Place it first (right after the env) so that every later transform works on ``device``;
    the TransformedEnv's ``device`` becomes ``device``.

    Args:
        device: where the data should live.
        orig_device: the device of the env below, where actions go back (default: that env's
            device, read when the transform is attached; CPU for an env without one).
        in_keys: must stay ``None`` (the whole data moves); TorchRL's per-key casting is not
            supported, as are ``out_keys``, ``in_keys_inv`` and ``out_keys_inv``.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(), DeviceCastTransform("cpu"))
        >>> env.device, env.rand_step()["next", "observation"].device
        (device(type='cpu'), device(type='cpu'))
    """

    def __init__(
        self,
        device: torch.device | str,
        orig_device: torch.device | str | None = None,
        *,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        given = {"in_keys": in_keys, "out_keys": out_keys}
        given.update(in_keys_inv=in_keys_inv, out_keys_inv=out_keys_inv)
        for name, keys in given.items():
            if keys is not None:
                raise NotImplementedError(
                    f"DeviceCastTransform.__init__: per-key device casts are not supported (got "
                    f"{name}={keys!r}; expected None: the whole data moves). Drop {name}, or "
                    "move single entries with a custom Transform."
                )
        super().__init__()
        self.device_out = torch.device(device)
        self.orig_device = None if orig_device is None else torch.device(orig_device)
        self._device_in = self.orig_device or torch.device("cpu")

    def _bind(self, parent: EnvBase) -> None:
        if self.orig_device is None:
            self._device_in = parent.device if parent.device is not None else torch.device("cpu")

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.to(self.device_out)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        return next_tensordict.to(self.device_out)

    def _reset(
        self, tensordict_in: TensorDictBase | None, tensordict_out: TensorDictBase
    ) -> TensorDictBase:
        return tensordict_out.to(self.device_out)

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        # The whole root moves: envs may read more than their action and state entries.
        return tensordict.exclude("next").to(self._device_in)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Moves ``tensordict`` (root and ``"next"``) to ``device``."""
        return tensordict.to(self.device_out)

    def _move(self, spec: Composite) -> Composite:
        return spec.to(self.device_out)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        return self._move(observation_spec)

    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        return self._move(reward_spec)

    def transform_done_spec(self, done_spec: Composite) -> Composite:
        return self._move(done_spec)

    def transform_action_spec(self, action_spec: Composite) -> Composite:
        return self._move(action_spec)

    def transform_state_spec(self, state_spec: Composite) -> Composite:
        return self._move(state_spec)

    def extra_repr(self) -> str:
        return f"device={self.device_out}"
