"""Normal distribution squashed by tanh and rescaled to a box."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints, register_kl
from torch.nn.functional import softplus

from tdrl.modules.distributions._utils import (
    _EMPTY_SHAPE,
    Bound,
    SampleShape,
    _bounds,
    _check_number_bounds,
)

__all__ = ["TanhNormal"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def _clamped_tanh(x: Tensor) -> Tensor:
    lim = 1.0 - torch.finfo(x.dtype).resolution
    return x.tanh().clamp(-lim, lim)


class _SafeTanh(torch.autograd.Function):
    """``tanh`` kept one float resolution inside ``(-1, 1)``, with derivative ``1 - y^2``.

    This form (``setup_context``) works under torch.func transforms and torch.compile; its
    ``apply`` binds the arguments with ``inspect.signature`` on every call, which costs more
    than the maths at small batches, so eager code outside transforms uses
    :class:`_EagerSafeTanh` (the same maths) through :func:`safe_tanh`.
    """

    generate_vmap_rule = True  # the forward is plain torch ops: vmap can batch it

    @staticmethod
    def forward(x: Tensor) -> Tensor:  # type: ignore[override]
        return _clamped_tanh(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return grad * (1.0 - y.square())


class _EagerSafeTanh(torch.autograd.Function):
    """:class:`_SafeTanh` with the classic ``forward(ctx, x)``: no per-call signature binding."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:  # type: ignore[override]
        y = _clamped_tanh(x)
        ctx.save_for_backward(y)
        return y

    backward = _SafeTanh.backward


def safe_tanh(x: Tensor) -> Tensor:
    """The clamped tanh of :class:`_SafeTanh`, by the cheaper class where it can run."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return _SafeTanh.apply(x)
    return _EagerSafeTanh.apply(x)


class TanhNormal(Distribution):
    """A Normal sample ``x`` mapped to ``low + (high - low) * (tanh(x) + 1) / 2``.

    The usual policy for bounded continuous actions (SAC, PPO on boxes). The last
    ``event_dims`` dimensions (default: the last one) are the event (action) dimensions:
    ``log_prob`` sums over them, as in :class:`IndependentNormal`.

    - With ``safe_tanh`` (the default, as in TorchRL) ``tanh`` is clamped one float resolution
      inside ``(-1, 1)`` (derivative ``1 - y^2`` of the clamped value), so samples and modes
      never sit exactly on a bound.

    - ``log_prob(y)`` applies the change of variables with the stable
      ``log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2x))``. The pre-image ``x = atanh(u)``
      is computed from ``u = (y - center) / half`` clamped to ``[-1 + eps, 1 - eps]`` (``eps``
      the machine epsilon of the dtype), so a value exactly on a bound, which tanh produces
      once ``|x|`` exceeds about 9 in float32, gets a finite log-probability instead of
      ``inf``/``nan``. Values outside ``[low, high]`` are treated as the nearest bound (pass
      ``validate_args=True`` to reject them instead).
    - ``rsample_and_log_prob`` scores the pre-tanh draw directly and is exact even where tanh
      saturates; ``tensordict.nn.ProbabilisticTensorDictModule`` uses it when it writes
      log-probabilities of random samples.
    - ``mode`` and ``deterministic_sample`` return the image of the Normal's location,
      ``squash(loc)``. This is the usual deterministic action; it is not always the maximum of
      the squashed density, which becomes bimodal near the bounds for a large ``scale``.
    - ``mean`` is the Monte-Carlo-free approximation
      ``squash(loc / sqrt(1 + pi * scale^2 / 2))`` (``tanh`` written through the logistic
      function and the probit approximation of the latter); its error is below
      ``0.04 * (high - low) / 2``.
    - ``entropy`` has no closed form and raises ``NotImplementedError``: estimate it by
      Monte-Carlo (``-log_prob(rsample())``, the losses' ``samples_mc_entropy`` option).

    Args:
        loc: the location of the Normal before squashing, shape ``(*batch, n)``.
        scale: its standard deviation, positive, broadcastable to ``loc``: a tensor, a
            number, or a function of ``loc`` (e.g. ``torch.ones_like``).
        upscale: the bound of the location when ``tanh_loc`` is true.
        low: the lower bound, a number or a tensor broadcastable to ``loc``.
        high: the upper bound, larger than ``low``. Number bounds are always checked; tensor
            bounds only with ``validate_args=True`` (the check synchronises the device).
        event_dims: number of trailing event dims (default ``min(1, loc.ndim)``).
        tanh_loc: if true, the location is ``upscale * tanh(loc / upscale)``.
        safe_tanh: clamp ``tanh`` inside ``(-1, 1)`` (see above); ``False`` uses plain tanh.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Raises:
        ValueError: ``low >= high`` (number bounds) or ``event_dims`` out of range.

    Examples:
        >>> import torch
        >>> dist = TanhNormal(torch.zeros(3), torch.ones(3), low=0.0, high=2.0)
        >>> dist.mode
        tensor([1., 1., 1.])
        >>> action = dist.rsample((5,))
        >>> action.shape, bool(((action >= 0) & (action <= 2)).all())
        (torch.Size([5, 3]), True)
        >>> dist.log_prob(action).shape
        torch.Size([5])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    has_rsample = True

    def __init__(
        self,
        loc: Tensor,
        scale: Tensor | float | Callable[[Tensor], Tensor],
        upscale: float | Tensor = 5.0,
        low: Bound = -1.0,
        high: Bound = 1.0,
        event_dims: int | None = None,
        tanh_loc: bool = False,
        safe_tanh: bool = True,
        *,
        validate_args: bool = False,
    ) -> None:
        if not isinstance(loc, Tensor):
            loc = torch.as_tensor(loc, dtype=torch.get_default_dtype())
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        if callable(scale) and not isinstance(scale, Tensor):
            scale = scale(loc)
        elif not isinstance(scale, Tensor):
            scale = torch.as_tensor(scale, device=loc.device, dtype=loc.dtype)
        if isinstance(low, Tensor) or isinstance(high, Tensor):
            self.low, self.high = _bounds(low, high, loc, "TanhNormal.__init__", validate_args)
            bound_shapes = [self.low.shape, self.high.shape]
        else:  # numbers: checked now, made tensors on first use (most calls never read them)
            _check_number_bounds(low, high, "TanhNormal.__init__")
            self._numbers = (float(low), float(high))
            bound_shapes = []
        if loc.shape == scale.shape and all(len(s) == 0 for s in bound_shapes):
            shape = loc.shape  # the usual case, without broadcast_shapes' Python reference
        else:
            shape = torch.broadcast_shapes(loc.shape, scale.shape, *bound_shapes)
        k = min(1, len(shape)) if event_dims is None else int(event_dims)
        if not 0 <= k <= len(shape):
            raise ValueError(
                f"TanhNormal.__init__: event_dims is out of range (got {event_dims!r} for"
                f" parameters of shape {tuple(shape)}; expected 0 <= event_dims <= {len(shape)})."
                " Pass the number of trailing event dims."
            )
        self.loc = loc.expand(shape)
        self.scale = scale.expand(shape)
        self.upscale = upscale
        self.tanh_loc = tanh_loc
        self.safe_tanh = safe_tanh
        self._event_dims = k
        self._sum_dims = tuple(range(-k, 0))
        # The default box [-1, 1] given as numbers maps tanh to itself: the affine map and its
        # log-determinant (center 0, half-width 1, log 1 = 0) are skipped, not computed.
        self._unit = not isinstance(low, Tensor) and not isinstance(high, Tensor)
        self._unit = self._unit and float(low) == -1.0 and float(high) == 1.0
        n = len(shape) - k
        super().__init__(shape[:n], shape[n:], validate_args=validate_args)

    @functools.cached_property
    def low(self) -> Tensor:
        """The lower bound, a tensor on the device and dtype of ``loc``."""
        return torch.tensor(self._numbers[0], device=self.loc.device, dtype=self.loc.dtype)

    @functools.cached_property
    def high(self) -> Tensor:
        """The upper bound, a tensor on the device and dtype of ``loc``."""
        return torch.tensor(self._numbers[1], device=self.loc.device, dtype=self.loc.dtype)

    @functools.cached_property
    def _center(self) -> Tensor:
        return (self.high + self.low) / 2

    @functools.cached_property
    def _half(self) -> Tensor:
        return (self.high - self.low) / 2

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        """``[low, high]`` in each coordinate of the last dimension."""
        return constraints.independent(constraints.interval(self.low, self.high), self._event_dims)

    def _squash(self, x: Tensor) -> Tensor:
        y = safe_tanh(x) if self.safe_tanh else torch.tanh(x)
        return y if self._unit else self._center + self._half * y

    def _pre_tanh_sample(self, sample_shape: SampleShape) -> Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * noise

    def _log_prob_pre_tanh(self, x: Tensor) -> Tensor:
        z = (x - self.loc) / self.scale
        normal_lp = -0.5 * z.square() - self.scale.log() - _HALF_LOG_2PI
        log_abs_det = 2.0 * (_LOG_2 - x - softplus(-2.0 * x))
        if not self._unit:
            log_abs_det = log_abs_det + self._half.log()
        lp = normal_lp - log_abs_det
        return lp.sum(self._sum_dims) if self._sum_dims else lp

    def rsample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Draws a differentiable sample of shape ``sample_shape + batch_shape + event_shape``."""
        return self._squash(self._pre_tanh_sample(sample_shape))

    def rsample_and_log_prob(
        self, sample_shape: SampleShape = _EMPTY_SHAPE
    ) -> tuple[Tensor, Tensor]:
        """Draws a differentiable sample and its exact log-probability (from the pre-tanh draw)."""
        x = self._pre_tanh_sample(sample_shape)
        return self._squash(x), self._log_prob_pre_tanh(x)

    def sample_and_log_prob(
        self, sample_shape: SampleShape = _EMPTY_SHAPE
    ) -> tuple[Tensor, Tensor]:
        """Like :meth:`rsample_and_log_prob`, without gradients."""
        with torch.no_grad():
            return self.rsample_and_log_prob(sample_shape)

    def log_prob(self, value: Tensor) -> Tensor:
        """Log-density of ``value``, summed over the last dimension (see the class docstring)."""
        if self._validate_args:
            self._validate_sample(value)
        bound = 1.0 - torch.finfo(value.dtype).eps
        unit = value if self._unit else (value - self._center) / self._half
        unit = unit.clamp(-bound, bound)
        return self._log_prob_pre_tanh(torch.atanh(unit))

    @property
    def mode(self) -> Tensor:
        """``squash(loc)``: the image of the Normal's mode (see the class docstring)."""
        return self._squash(self.loc)

    @property
    def deterministic_sample(self) -> Tensor:
        """Same as :attr:`mode`; used by ``tensordict.nn`` for ``InteractionType.DETERMINISTIC``."""
        return self._squash(self.loc)

    @property
    def mean(self) -> Tensor:
        """Closed-form approximation of the mean (see the class docstring)."""
        shrink = torch.rsqrt(1.0 + (math.pi / 2.0) * self.scale.square())
        return self._squash(self.loc * shrink)

    def entropy(self) -> Tensor:
        """Not available in closed form: raises ``NotImplementedError``."""
        raise NotImplementedError(
            "TanhNormal.entropy: the entropy of a tanh-squashed Normal has no closed form "
            "(got a call to entropy(); expected a Monte-Carlo estimate instead). Estimate it as "
            "-dist.log_prob(dist.rsample()).mean(0), e.g. with the loss option samples_mc_entropy."
        )


@register_kl(TanhNormal, TanhNormal)
def _kl_tanh_normal(p: TanhNormal, q: TanhNormal) -> Tensor:
    """``KL(p || q)``: the KL of the pre-tanh Normals, the squashing being the same bijection
    for both (as torch's rule for transformed distributions, which TorchRL's TanhNormal
    follows). Distributions with other bounds or event dims have no closed form here."""
    same = p._event_dims == q._event_dims and p.safe_tanh == q.safe_tanh
    if same and not torch.compiler.is_compiling():
        # Checked outside torch.compile only (a data-dependent branch would break the graph).
        same = bool(torch.equal(p.low, q.low) and torch.equal(p.high, q.high))
    if not same:
        raise NotImplementedError(
            "kl_divergence(TanhNormal, TanhNormal): the two distributions squash differently"
            " (got other bounds, event dims or safe_tanh; expected the same). Compare"
            " distributions of the same actor, or estimate the KL by Monte-Carlo."
        )
    var_ratio = (p.scale / q.scale).square()
    gap = ((p.loc - q.loc) / q.scale).square()
    kl = 0.5 * (var_ratio + gap - 1.0 - var_ratio.log())
    return kl.sum(p._sum_dims) if p._sum_dims else kl
