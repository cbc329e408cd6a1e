"""Normal distribution truncated to a box, with closed-form moments."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints
from torch.special import erfc, log_ndtr, ndtri

from tdrl.modules.distributions._utils import (
    _EMPTY_SHAPE,
    Bound,
    SampleShape,
    _bounds,
    _event_shape,
)

__all__ = ["TruncatedNormal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)


def _ndtr(z: Tensor) -> Tensor:
    # torch.special.ndtr loses its relative precision in the lower tail (it returns 6.106e-16
    # for Phi(-8) = 6.221e-16 in float64 and 0 below -8.3); erfc keeps it down to underflow.
    return 0.5 * erfc(z * -_SQRT_HALF)


def _log_phi(z: Tensor) -> Tensor:
    return -0.5 * z.square() - _HALF_LOG_2PI


class TruncatedNormal(Distribution):
    """A Normal ``N(loc, scale)`` conditioned on lying in ``[low, high]``.

    With ``alpha = (low - loc) / scale``, ``beta = (high - loc) / scale`` and
    ``Z = Phi(beta) - Phi(alpha)`` (``Phi`` the standard normal CDF, ``phi`` its density):

    - density ``phi((x - loc) / scale) / (scale * Z)`` on ``[low, high]``, 0 elsewhere;
    - samples by inverse CDF, ``loc + scale * Phi^-1(Phi(alpha) + u * Z)``, ``u ~ U(0, 1)``,
      which is differentiable in ``loc`` and ``scale`` (``rsample``) and clamped to the box;
    - ``mean = loc + scale * (phi(alpha) - phi(beta)) / Z``, ``mode = clamp(loc, low, high)``,
      ``entropy = log(sqrt(2 pi e) scale Z) + (alpha phi(alpha) - beta phi(beta)) / (2 Z)``.

    When the box lies in the upper tail, the computation is mirrored so that ``Z`` is a
    difference of two small CDF values rather than of two numbers close to 1, and ``log Z``
    comes from ``log_ndtr``. Densities and moments stay finite far in the tails; sampling,
    which needs ``Phi`` itself, loses its precision when the whole box is more than about 13
    (float32) or 37 (float64) standard deviations away from ``loc``: the samples then collapse
    onto the bound nearest to ``loc``. The last dimension is the event (action) dimension:
    ``log_prob`` and ``entropy`` sum over it. ``deterministic_sample`` is the mean.

    Args:
        loc: the location of the untruncated Normal, shape ``(*batch, n)``.
        scale: its standard deviation, positive, broadcastable to ``loc``.
        upscale: the bound of the location when ``tanh_loc`` is true.
        low: the lower bound, a number or a tensor broadcastable to ``loc``.
        high: the upper bound, larger than ``low``. Tensor bounds are only checked with
            ``validate_args=True`` (the check synchronises the device).
        tanh_loc: if true, ``loc`` is first mapped to ``upscale * tanh(loc / upscale)``, which
            keeps an unbounded network output within ``(-upscale, upscale)``.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Examples:
        >>> import torch
        >>> dist = TruncatedNormal(torch.zeros(2), torch.ones(2), low=0.0, high=1.0)
        >>> dist.mode
        tensor([0., 0.])
        >>> sample = dist.sample((100,))
        >>> bool(((sample >= 0) & (sample <= 1)).all())
        True
        >>> dist.log_prob(torch.full((2,), 2.0))
        tensor(-inf)
        >>> TruncatedNormal(torch.tensor([100.0]), torch.ones(1), 2.0, -5.0, 5.0, True).loc
        tensor([2.])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    has_rsample = True

    def __init__(
        self,
        loc: Tensor,
        scale: Tensor,
        upscale: Tensor | float = 5.0,
        low: Bound = -1.0,
        high: Bound = 1.0,
        tanh_loc: bool = False,
        *,
        validate_args: bool = False,
    ) -> None:
        self.upscale = upscale
        self.tanh_loc = tanh_loc
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        self.low, self.high = _bounds(low, high, loc, "TruncatedNormal.__init__", validate_args)
        shape = torch.broadcast_shapes(loc.shape, scale.shape, self.low.shape, self.high.shape)
        self.loc = loc.expand(shape)
        self.scale = scale.expand(shape)
        event_shape = _event_shape(self.loc, "TruncatedNormal.__init__", "loc")
        self._alpha = (self.low - self.loc) / self.scale
        self._beta = (self.high - self.loc) / self.scale
        # Mirror boxes in the upper tail: there Phi(beta) - Phi(alpha) would cancel.
        self._flip = self._alpha > 0
        self._a = torch.where(self._flip, -self._beta, self._alpha)
        self._b = torch.where(self._flip, -self._alpha, self._beta)
        log_cdf_a, log_cdf_b = log_ndtr(self._a), log_ndtr(self._b)
        # log(Phi(b) - Phi(a)) = log Phi(b) + log(1 - Phi(a) / Phi(b)); the ratio is below 1.
        self._log_z = log_cdf_b + torch.log1p(-torch.exp(log_cdf_a - log_cdf_b))
        super().__init__(shape[:-1], event_shape, validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        """``[low, high]`` in each coordinate of the last dimension."""
        return constraints.independent(constraints.interval(self.low, self.high), 1)

    def _ratio(self, z: Tensor) -> Tensor:
        """``phi(z) / Z``, computed in log space (0 for infinite bounds)."""
        return torch.exp(_log_phi(z) - self._log_z)

    def _z_ratio(self, z: Tensor) -> Tensor:
        """``z * phi(z) / Z`` with 0 for an infinite bound (avoids ``inf * 0``)."""
        finite = torch.isfinite(z)
        return torch.where(finite, torch.where(finite, z, 0.0) * self._ratio(z), 0.0)

    def rsample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Draws a differentiable sample by inverse CDF (see the class docstring)."""
        shape = self._extended_shape(torch.Size(sample_shape))
        a, b = self._a, self._b
        with torch.no_grad():
            # u >= tiny: with an infinite bound, u = 0 would give Phi^-1(0) = -inf.
            tiny = torch.finfo(self.loc.dtype).tiny
            u = torch.rand(shape, dtype=self.loc.dtype, device=self.loc.device).clamp_min(tiny)
            cdf_a, cdf_b = _ndtr(a), _ndtr(b)
            # Phi(b) underflowed (box far in the tail): fall back to the bound nearest loc.
            representable = cdf_b > 0
            p = torch.where(representable, cdf_a + u * (cdf_b - cdf_a), 0.5)
            z = torch.where(representable, ndtri(p), b)
            z = torch.minimum(torch.maximum(z, a), b)
            # Pathwise derivatives of z = Phi^-1(Phi(a) + u Z), written as ratios of densities
            # in log space: autograd through ndtri would divide by phi(z), which underflows.
            dz_da = torch.exp(torch.log1p(-u) + 0.5 * (z.square() - a.square()))
            dz_db = torch.exp(u.log() + 0.5 * (z.square() - b.square()))
        # Same value as z, with the gradient above (infinite bounds carry none).
        a_f = torch.where(torch.isfinite(a), a, 0.0)
        b_f = torch.where(torch.isfinite(b), b, 0.0)
        z = z + dz_da * (a_f - a_f.detach()) + dz_db * (b_f - b_f.detach())
        z = torch.where(self._flip, -z, z)
        x = self.loc + self.scale * z
        return torch.minimum(torch.maximum(x, self.low), self.high)

    def log_prob(self, value: Tensor) -> Tensor:
        """Log-density of ``value`` summed over the last dimension; ``-inf`` outside the box."""
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        lp = _log_phi(z) - self.scale.log() - self._log_z
        inside = (value >= self.low) & (value <= self.high)
        return torch.where(inside, lp, -math.inf).sum(-1)

    def cdf(self, value: Tensor) -> Tensor:
        """Per-coordinate CDF (no sum over the last dimension), clamped to ``[0, 1]``."""
        z = (value - self.loc) / self.scale
        z_m = torch.where(self._flip, -z, z)
        num = torch.where(self._flip, _ndtr(self._b) - _ndtr(z_m), _ndtr(z_m) - _ndtr(self._a))
        return (num / self._log_z.exp()).clamp(0.0, 1.0)

    @property
    def mean(self) -> Tensor:
        """``loc + scale * (phi(alpha) - phi(beta)) / Z``."""
        return self.loc + self.scale * (self._ratio(self._alpha) - self._ratio(self._beta))

    @property
    def variance(self) -> Tensor:
        """``scale^2 * (1 + (alpha phi(alpha) - beta phi(beta)) / Z - ((phi(alpha) - phi(beta)) / Z)^2)``."""
        shift = self._ratio(self._alpha) - self._ratio(self._beta)
        spread = self._z_ratio(self._alpha) - self._z_ratio(self._beta)
        return self.scale.square() * (1.0 + spread - shift.square()).clamp_min(0.0)

    @property
    def mode(self) -> Tensor:
        """``loc`` clamped to ``[low, high]``."""
        return torch.minimum(torch.maximum(self.loc, self.low), self.high)

    @property
    def deterministic_sample(self) -> Tensor:
        """The mean; used by ``tensordict.nn`` for ``InteractionType.DETERMINISTIC``."""
        return self.mean

    def entropy(self) -> Tensor:
        """Differential entropy, summed over the last dimension."""
        spread = self._z_ratio(self._alpha) - self._z_ratio(self._beta)
        per_dim = _HALF_LOG_2PI + 0.5 + self.scale.log() + self._log_z + 0.5 * spread
        return per_dim.sum(-1)
