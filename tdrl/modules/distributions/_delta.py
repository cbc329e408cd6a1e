"""Deterministic (Dirac) distributions, for deterministic policies such as DDPG/TD3 actors."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints

from tdrl.modules.distributions._tanh_normal import safe_tanh
from tdrl.modules.distributions._utils import _EMPTY_SHAPE, Bound, SampleShape, _bounds

__all__ = ["Delta", "TanhDelta"]


def _split_shape(
    shape: torch.Size, batch_shape: SampleShape | None, event_shape: SampleShape | None
) -> tuple[torch.Size, torch.Size]:
    """``(batch, event)`` of a ``param`` of ``shape``; the last dim is the event by default.

    Empty or missing shapes mean the default (as in TorchRL); one given shape fixes the other.
    """
    batch = torch.Size(batch_shape or ())
    event = torch.Size(event_shape or ())
    if not batch and not event:
        return shape[:-1], shape[-1:]
    if not event:
        event = shape[len(batch) :]
    elif not batch:
        batch = shape[: len(shape) - len(event)]
    if batch + event != shape:
        raise ValueError(
            f"Delta.__init__: batch_shape + event_shape must be the shape of param (got "
            f"batch_shape={tuple(batch)}, event_shape={tuple(event)}, param shape "
            f"{tuple(shape)}; expected them to concatenate to the param shape). Fix the shapes "
            "or leave them out (the last dim is then the event)."
        )
    return batch, event


class Delta(Distribution):
    """A distribution that always returns ``param``.

    ``sample`` returns a detached copy of ``param``, ``rsample`` a copy that keeps the graph
    (gradients reach ``param``). ``log_prob`` is 0 where the value is close to ``param`` in
    every coordinate of the event dimensions (``torch.isclose`` with ``atol``/``rtol``) and
    ``-inf`` elsewhere. ``mode``, ``mean`` and ``deterministic_sample`` are ``param``. A 0-d
    ``param`` has an empty event shape.

    Args:
        param: the value, shape ``(*batch_shape, *event_shape)``.
        atol: absolute tolerance of ``log_prob``'s comparison.
        rtol: relative tolerance of ``log_prob``'s comparison.
        batch_shape: the batch dims of ``param``; with ``event_shape`` missing or empty, the
            remaining dims are the event.
        event_shape: the trailing event dims of ``param``. Both missing or empty (the default):
            the last dim is the event. Given together they must concatenate to ``param.shape``.
        validate_args: check the values given to ``log_prob`` (slower).

    Raises:
        ValueError: ``batch_shape`` and ``event_shape`` do not make up ``param.shape``.

    Examples:
        >>> import torch
        >>> dist = Delta(torch.tensor([0.5, -1.0]))
        >>> dist.sample((2,))
        tensor([[ 0.5000, -1.0000],
                [ 0.5000, -1.0000]])
        >>> dist.log_prob(torch.tensor([[0.5, -1.0], [0.5, 0.0]]))
        tensor([0., -inf])
        >>> Delta(torch.zeros(2, 3, 4), event_shape=(3, 4)).log_prob(torch.zeros(2, 3, 4))
        tensor([0., 0.])
    """

    arg_constraints = {"param": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(
        self,
        param: Tensor,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        batch_shape: SampleShape | None = None,
        event_shape: SampleShape | None = None,
        *,
        validate_args: bool = False,
    ) -> None:
        self.param = param
        self.atol = atol
        self.rtol = rtol
        batch, event = _split_shape(param.shape, batch_shape, event_shape)
        super().__init__(batch, event, validate_args=validate_args)

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
            close = close.flatten(-len(self.event_shape)).all(-1)
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
    one, and gradients of ``rsample`` flow through the tanh to ``param``. With ``safe`` (the
    default, as in TorchRL) ``tanh`` is clamped one float resolution inside ``(-1, 1)`` (the
    derivative is ``1 - y^2`` of the clamped value), so the value never sits exactly on a bound.

    Args:
        param: the pre-tanh value, shape ``(*batch, *event)``.
        low: the lower bound, a number or a tensor broadcastable to ``param``.
        high: the upper bound, larger than ``low``. Tensor bounds are only checked with
            ``validate_args=True`` (the check synchronises the device).
        event_dims: the number of trailing dims of ``param`` that make one event.
        atol: absolute tolerance of ``log_prob``'s comparison.
        rtol: relative tolerance of ``log_prob``'s comparison.
        safe: clamp ``tanh`` inside ``(-1, 1)``; ``False`` uses plain ``tanh``.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Raises:
        ValueError: ``low >= high`` (number bounds) or ``event_dims`` out of range.

    Examples:
        >>> import torch
        >>> dist = TanhDelta(torch.tensor([0.0, 100.0]), -2.0, 4.0, safe=False)
        >>> dist.mode
        tensor([1., 4.])
        >>> bool(TanhDelta(torch.tensor([100.0]), -2.0, 4.0).mode < 4.0)
        True
        >>> TanhDelta(torch.zeros(5, 2, 3), event_dims=2).event_shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        param: Tensor,
        low: Bound = -1.0,
        high: Bound = 1.0,
        event_dims: int = 1,
        atol: float = 1e-6,
        rtol: float = 1e-6,
        safe: bool = True,
        *,
        validate_args: bool = False,
    ) -> None:
        if not 0 <= int(event_dims) <= param.ndim:
            raise ValueError(
                f"TanhDelta.__init__: event_dims is out of range (got {event_dims!r} for a param"
                f" of shape {tuple(param.shape)}; expected 0 <= event_dims <= {param.ndim})."
                " Pass the number of trailing event dims."
            )
        self.low, self.high = _bounds(low, high, param, "TanhDelta.__init__", validate_args)
        self.safe = safe
        squashed = safe_tanh(param) if safe else torch.tanh(param)
        value = (self.high + self.low) / 2 + (self.high - self.low) / 2 * squashed
        split = value.ndim - int(event_dims)
        super().__init__(
            value,
            atol,
            rtol,
            value.shape[:split],
            value.shape[split:],
            validate_args=validate_args,
        )

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        """``[low, high]``."""
        return constraints.interval(self.low, self.high)
