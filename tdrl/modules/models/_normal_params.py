"""NormalParamExtractor: split a network output into a location and a positive scale."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.functional import softplus

__all__ = ["NormalParamExtractor"]

_BIASED = "biased_softplus"


def _expln(x: torch.Tensor) -> torch.Tensor:
    """``exp(x)`` for ``x <= 0``, ``log1p(x) + 1`` above: positive, linear-ish growth."""
    return torch.where(x <= 0, x.clamp_max(0.0).exp(), x.clamp_min(0.0).log1p() + 1.0)


_PLAIN: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softplus": softplus,
    "exp": torch.exp,
    "relu": torch.relu,
    "expln": _expln,
    "none": lambda x: x,
}


def _inv_softplus(value: float) -> float:
    return math.log(max(math.expm1(value), 1e-6))


def _parse_mapping(name: str) -> tuple[str, float, float]:
    """``(kind, shift, min_val)`` of a mapping name (TorchRL's names, through tensordict).

    ``biased_softplus_<b>[_<m>]`` is ``softplus(x + shift) + m`` with ``shift`` chosen so
    that a zero input gives ``b`` (``m`` defaults to 0.01); ``biased_softplus`` alone is
    ``biased_softplus_1.0``.
    """
    if name in _PLAIN:
        return name, 0.0, 0.0
    parts = name.split("_")
    if name.startswith(_BIASED) and len(parts) in (2, 3, 4):
        try:
            bias = float(parts[2]) if len(parts) > 2 else 1.0
            min_val = float(parts[3]) if len(parts) > 3 else 0.01
        except ValueError:
            bias = min_val = -1.0
        if bias > min_val >= 0:
            return "biased", _inv_softplus(bias - min_val), min_val
    raise ValueError(
        f"NormalParamExtractor.__init__: unknown scale mapping (got {name!r}; expected one of"
        f" {sorted(_PLAIN)}, 'biased_softplus', 'biased_softplus_<bias>' or"
        " 'biased_softplus_<bias>_<min>' with bias > min >= 0). Pass e.g. 'biased_softplus_1.0'."
    )


class NormalParamExtractor(nn.Module):
    """Splits the last dim of its input in two halves: ``loc`` and a positive ``scale``.

    Put it after a network with ``2 * action_dim`` outputs; a
    ``TensorDictModule(..., out_keys=["loc", "scale"])`` then writes both.

    Args:
        scale_mapping: how the second half becomes positive, with TorchRL's (tensordict's)
            names: ``"softplus"``, ``"exp"``, ``"relu"``, ``"expln"``, ``"none"``, or
            ``"biased_softplus_<b>"`` (``softplus(x + shift) + 0.01`` with ``shift`` such that
            a zero input gives scale ``b``; ``"biased_softplus_<b>_<m>"`` sets the minimum
            ``m``, ``"biased_softplus"`` is ``b = 1``).
        scale_lb: lower bound of the scale (keeps log-probabilities finite).

    Raises:
        ValueError: unknown mapping, or an odd last dim at call time.

    Examples:
        >>> loc, scale = NormalParamExtractor()(torch.zeros(3, 4))
        >>> loc.shape, scale[0].tolist()
        (torch.Size([3, 2]), [1.0, 1.0])
    """

    def __init__(self, scale_mapping: str = "biased_softplus_1.0", scale_lb: float = 1e-4) -> None:
        super().__init__()
        self._kind, self._shift, self._min = _parse_mapping(scale_mapping)
        self.scale_mapping = scale_mapping
        self.scale_lb = scale_lb

    def forward(self, x: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Returns ``(loc, scale, *others)``, ``loc`` and ``scale`` of shape ``(*batch, n // 2)``
        (extra inputs pass through, as TorchRL's)."""
        n = x.shape[-1]
        if n % 2:
            raise ValueError(
                f"NormalParamExtractor.forward: the last dim must be even (got {n}; expected"
                " 2 * action_dim). Make the network output twice the action size."
            )
        loc, raw = x.chunk(2, -1)
        if self._kind == "biased":
            scale = softplus(raw + self._shift) + self._min
        else:
            scale = _PLAIN[self._kind](raw)
        return (loc, scale.clamp_min(self.scale_lb), *others)

    def extra_repr(self) -> str:
        return f"scale_mapping={self.scale_mapping!r}, scale_lb={self.scale_lb}"
