"""TanhModule: squash network outputs into a box with tanh (deterministic bounded policies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.modules.actors._spec_utils import as_key_list, spec_for_key
from tdrl.specs import Bounded, TensorSpec

__all__ = ["TanhModule"]

BoundLike = float | Sequence[float] | torch.Tensor | None


def _bound(
    value: BoundLike, spec: TensorSpec | None, name: str, default: float, key: NestedKey
) -> torch.Tensor:
    spec_value = getattr(spec, name) if isinstance(spec, Bounded) else None
    if spec is not None and spec_value is None:
        raise TypeError(
            f"TanhModule.__init__: the spec of {key!r} has no bounds (got"
            f" {type(spec).__name__}; expected Bounded). Pass a Bounded spec or low/high."
        )
    if value is None:
        return spec_value.clone() if spec_value is not None else torch.tensor(default)
    tensor = torch.as_tensor(value)
    if spec_value is not None and bool((tensor != spec_value).any()):
        raise ValueError(
            f"TanhModule.__init__: {name} disagrees with the spec of {key!r} (got {name}="
            f"{tensor.tolist()}; expected the spec's {spec_value.tolist()}). Pass one of them."
        )
    return tensor


class TanhModule(TensorDictModuleBase):
    """Maps each input ``x`` to ``low + (high - low) * (tanh(x) + 1) / 2``.

    Put it after a deterministic actor network (DDPG/TD3) so its action lies in the action
    box. Bounds come from ``low``/``high``, or from ``spec`` (a ``Bounded`` leaf used for every
    key, or a ``Composite`` with one leaf per output key); ``[-1, 1]`` without either.

    Args:
        in_keys: keys of the unbounded inputs.
        out_keys: where the bounded values are written (default: ``in_keys``, in place).
        spec: the output spec (see above).
        low: lower bound, a number or a tensor broadcastable to the input.
        high: upper bound.
        clamp: keep ``tanh(x)`` one float resolution away from ``±1`` (so the value never
            sits exactly on a bound, where the inverse map is infinite).

    Raises:
        ValueError: ``in_keys``/``out_keys`` of different lengths, ``high < low``, or
            bounds that disagree with the spec.
        TypeError: a spec leaf without bounds.

    Examples:
        >>> from tensordict import TensorDict
        >>> mod = TanhModule(["action"], low=-2.0, high=1.0)
        >>> mod(TensorDict(action=torch.tensor([0.0, 100.0, -100.0]))).get("action").tolist()
        [-0.5, 1.0, -2.0]
    """

    def __init__(
        self,
        in_keys: NestedKey | Sequence[NestedKey],
        out_keys: NestedKey | Sequence[NestedKey] | None = None,
        *,
        spec: TensorSpec | None = None,
        low: BoundLike = None,
        high: BoundLike = None,
        clamp: bool = False,
    ) -> None:
        super().__init__()
        ins = as_key_list(in_keys)
        outs = ins if out_keys is None else as_key_list(out_keys)
        if len(ins) != len(outs):
            raise ValueError(
                f"TanhModule.__init__: in_keys and out_keys differ in length (got {ins} and"
                f" {outs}; expected one output per input). Pass as many out_keys as in_keys."
            )
        self.in_keys = cast(list[Any], ins)
        self.out_keys = cast(list[Any], outs)
        self.spec = spec
        self.clamp = clamp
        self._buffers_of: list[tuple[str, str]] = []
        for key in outs:
            leaf = spec_for_key(spec, key, first=True)  # a leaf spec serves every key
            lo = _bound(low, leaf, "low", -1.0, key)
            hi = _bound(high, leaf, "high", 1.0, key)
            if bool((hi < lo).any()):
                raise ValueError(
                    f"TanhModule.__init__: high < low for {key!r} (got low={lo.tolist()},"
                    f" high={hi.tolist()}; expected low <= high). Swap the bounds."
                )
            name = key if isinstance(key, str) else "_".join(key)
            self.register_buffer(f"{name}_low", lo)
            self.register_buffer(f"{name}_high", hi)
            self._buffers_of.append((f"{name}_low", f"{name}_high"))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the squashed values of ``in_keys`` to ``out_keys``."""
        for in_key, out_key, (lo_name, hi_name) in zip(
            self.in_keys, self.out_keys, self._buffers_of
        ):
            y = tensordict.get(in_key).tanh()
            if self.clamp:
                eps = torch.finfo(y.dtype).resolution
                y = y.clamp(-1.0 + eps, 1.0 - eps)
            low, high = getattr(self, lo_name), getattr(self, hi_name)
            tensordict.set(out_key, low + (high - low) * (y + 1.0) / 2.0)
        return tensordict
