"""Deterministic (Dirac) distributions, for deterministic policies such as DDPG/TD3 actors."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints

from tdrl.modules.distributions._utils import _EMPTY_SHAPE, Bound, SampleShape, _bounds

__all__ = ["Delta", "TanhDelta"]


class Delta(Distribution):
    """A distribution that always returns ``param``.

    ``sample`` returns a detached copy of ``param``, ``rsample`` a copy that keeps the graph
    (gradients reach ``param``). ``log_prob`` is 0 where the value is close to ``param`` in
    every coordinate of the last (event) dimension (``torch.isclose`` with ``atol``/``rtol``)
    and ``-inf`` elsewhere. ``mode``, ``mean`` and ``deterministic_sample`` are ``param``. A
    0-d ``param`` has an empty event shape.

    Args:
        param: the value, shape ``(*batch, n)``.
        atol: absolute tolerance of ``log_prob``'s comparison.
        rtol: relative tolerance of ``log_prob``'s comparison.
        validate_args: check the values given to ``log_prob`` (slower).

    Examples:
        >>> import torch
        >>> dist = Delta(torch.tensor([0.5, -1.0]))
        >>> dist.sample((2,))
        tensor([[ 0.5000, -1.0000],
                [ 0.5000, -1.0000]])
        >>> dist.log_prob(torch.tensor([[0.5, -1.0], [0.5, 0.0]]))
        tensor([0., -inf])
    """

    arg_constraints = {"param": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(
        self,
        param: Tensor,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        *,
        validate_args: bool = False,
    ) -> None:
        self.param = param
        self.atol = atol
        self.rtol = rtol
        event_shape = param.shape[-1:]
        super().__init__(param.shape[:-1], event_shape, validate_args=validate_args)

    def rsample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Returns ``param`` expanded to ``sample_shape``, as a new tensor that keeps the graph."""
        return self.param.expand(torch.Size(sample_shape) + self.param.shape).clone()

    def sample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Returns a detached copy of ``param`` expanded to ``sample_shape``."""
        with torch.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: Tensor) -> Tensor:
        """0 where ``value`` matches ``param`` in the whole event, ``-inf`` elsewhere."""
        if self._validate_args:
            self._validate_sample(value)
        close = torch.isclose(value, self.param, rtol=self.rtol, atol=self.atol)
        if self.event_shape:
            close = close.all(-1)
        zero = torch.zeros((), dtype=self.param.dtype, device=self.param.device)
        return torch.where(close, zero, -math.inf)

    @property
    def mode(self) -> Tensor:
        """``param``."""
        return self.param

    @property
    def mean(self) -> Tensor:
        """``param``."""
        return self.param

    @property
    def variance(self) -> Tensor:
        """Zeros."""
        return torch.zeros_like(self.param)

    @property
    def deterministic_sample(self) -> Tensor:
        """``param``; used by ``tensordict.nn`` for ``InteractionType.DETERMINISTIC``."""
        return self.param

    def entropy(self) -> Tensor:
        """Not defined for a point mass: raises ``NotImplementedError``."""
        raise NotImplementedError(
            f"{type(self).__name__}.entropy: a point mass has no (differential) entropy (got a "
            "call to entropy(); expected none). Use a stochastic distribution such as "
            "TanhNormal when the loss needs an entropy term."
        )


class TanhDelta(Delta):
    """A :class:`Delta` at ``low + (high - low) * (tanh(param) + 1) / 2``.

    The usual deterministic policy for bounded actions: an unbounded network output squashed
    into ``[low, high]``. All values (``sample``, ``mode``, ``mean``, ...) are the squashed
    one, and gradients of ``rsample`` flow through the tanh to ``param``.

    Args:
        param: the pre-tanh value, shape ``(*batch, n)``.
        low: the lower bound, a number or a tensor broadcastable to ``param``.
        high: the upper bound, larger than ``low``. Tensor bounds are only checked with
            ``validate_args=True`` (the check synchronises the device).
        atol: absolute tolerance of ``log_prob``'s comparison.
        rtol: relative tolerance of ``log_prob``'s comparison.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Examples:
        >>> import torch
        >>> dist = TanhDelta(torch.tensor([0.0, 100.0]), low=-2.0, high=4.0)
        >>> dist.mode
        tensor([1., 4.])
    """

    def __init__(
        self,
        param: Tensor,
        *,
        low: Bound = -1.0,
        high: Bound = 1.0,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        validate_args: bool = False,
    ) -> None:
        self.low, self.high = _bounds(low, high, param, "TanhDelta.__init__", validate_args)
        value = (self.high + self.low) / 2 + (self.high - self.low) / 2 * torch.tanh(param)
        super().__init__(value, atol=atol, rtol=rtol, validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        """``[low, high]``."""
        return constraints.interval(self.low, self.high)
