"""NormalParamExtractor: split a network output into a location and a positive scale."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.functional import softplus

__all__ = ["NormalParamExtractor"]

_BIASED = "biased_softplus_"


def _parse_mapping(name: str) -> tuple[str, float]:
    """``(kind, shift)`` of a mapping name; kind is ``"softplus"`` or ``"exp"``."""
    if name in ("softplus", "exp"):
        return name, 0.0
    if name.startswith(_BIASED):
        try:
            bias = float(name[len(_BIASED) :])
        except ValueError:
            bias = -1.0
        if bias > 0:
            # softplus(x + shift) == bias at x == 0, so an untrained head starts at scale `bias`.
            return "softplus", math.log(math.expm1(bias))
    raise ValueError(
        f"NormalParamExtractor.__init__: unknown scale mapping (got {name!r}; expected 'softplus',"
        " 'exp' or 'biased_softplus_<positive float>'). Pass e.g. 'biased_softplus_1.0'."
    )


class NormalParamExtractor(nn.Module):
    """Splits the last dim of its input in two halves: ``loc`` and a positive ``scale``.

    Put it after a network with ``2 * action_dim`` outputs; a
    ``TensorDictModule(..., out_keys=["loc", "scale"])`` then writes both.

    Args:
        scale_mapping: how the second half becomes positive: ``"softplus"``, ``"exp"`` or
            ``"biased_softplus_<b>"`` (softplus shifted so that a zero input gives scale ``b``).
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
        self._kind, self._shift = _parse_mapping(scale_mapping)
        self.scale_mapping = scale_mapping
        self.scale_lb = scale_lb

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(loc, scale)``, each of shape ``(*batch, n // 2)``."""
        n = x.shape[-1]
        if n % 2:
            raise ValueError(
                f"NormalParamExtractor.forward: the last dim must be even (got {n}; expected"
                " 2 * action_dim). Make the network output twice the action size."
            )
        loc, raw = x.chunk(2, -1)
        if self._kind == "exp":
            scale = raw.exp()
        else:
            scale = softplus(raw + self._shift) if self._shift else softplus(raw)
        return loc, scale.clamp_min(self.scale_lb)

    def extra_repr(self) -> str:
        return f"scale_mapping={self.scale_mapping!r}, scale_lb={self.scale_lb}"
