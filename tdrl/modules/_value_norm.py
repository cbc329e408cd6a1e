"""Value normalisers: running location and scale of value targets (TorchRL's ``value_norm``).

A critic trained on raw returns sees its regression target drift with the reward scale. A value
normaliser keeps running statistics of the targets so a loss can regress ``normalize(target)``
and turn the critic's output back into returns with ``denormalize`` (MAPPO's recipe). Three
concrete normalisers share the :class:`ValueNorm` interface:

- :class:`PopArtValueNorm`: debiased exponential moving averages of the mean and the mean of
  squares (PopArt, van Hasselt et al. 2019).
- :class:`RunningValueNorm`: the exact running mean and population variance of every target seen.
- :class:`PercentileValueNorm`: moving averages of a low and a high quantile; the scale is their
  clamped span (DreamerV3's return normalisation), by default without centring.

Every statistic is a registered buffer, so ``state_dict``/``load_state_dict`` carry it and
``.to(device)`` moves it. The buffer names are TorchRL's, so state dicts load across libraries.
"""

from __future__ import annotations

import abc
import math

import torch
from torch import nn

__all__ = ["PercentileValueNorm", "PopArtValueNorm", "RunningValueNorm", "ValueNorm"]

DeviceLike = torch.device | str | int | None


def _as_shape(owner: str, shape: int | tuple[int, ...]) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(
            f"{owner}.__init__: shape must be a positive int or a tuple of positive ints (got"
            f" {shape!r}; expected e.g. 1 or (2, 3)). Pass the per-element shape of the value."
        )
    return dims


class ValueNorm(nn.Module, abc.ABC):
    """Interface of a value normaliser: ``update``, ``normalize``, ``denormalize`` and ``scale``.

    Every method works on tensors whose trailing dims equal :attr:`shape` (the per-element value
    shape, ``(1,)`` for a usual ``[*batch, 1]`` value); ``update`` reduces every leading dim.
    Subclasses implement the first three; :meth:`scale` (the divisor ``normalize`` applies,
    needed to rescale advantages without re-centring them) raises until a subclass defines it.

    Keyword Args:
        shape: per-element shape of the value (an int is a 1-tuple). Defaults to ``1``.
        epsilon: numerical floor used by the subclasses. Defaults to ``1e-5``.
        device: where the statistics buffers are created.

    Examples:
        >>> vn = RunningValueNorm(shape=1)
        >>> isinstance(vn, ValueNorm), vn.shape
        (True, (1,))
    """

    shape: tuple[int, ...]

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        self.shape = _as_shape(type(self).__name__, shape)
        self.epsilon = epsilon
        self._device = device

    @abc.abstractmethod
    def update(self, value_target: torch.Tensor) -> None:
        """Folds a batch of value targets (trailing dims :attr:`shape`) into the statistics."""

    @abc.abstractmethod
    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """Returns ``value_target`` standardised with the current statistics."""

    @abc.abstractmethod
    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """Returns the real-scale values of ``normalised_value`` (inverse of :meth:`normalize`)."""

    def scale(self) -> torch.Tensor:
        """The multiplicative scale :meth:`normalize` divides by (shape :attr:`shape`)."""
        raise NotImplementedError(
            f"{type(self).__name__}.scale: this normaliser does not define scale() (got a"
            " subclass without it; expected an override returning the divisor normalize()"
            " applies). Implement scale() to use it where only the scale is applied."
        )

    def _reduce_dims(self, value_target: torch.Tensor) -> tuple[int, ...]:
        """The leading dims ``update`` reduces; raises when the trailing dims are not ``shape``."""
        lead = value_target.ndim - len(self.shape)
        if lead < 0 or tuple(value_target.shape[lead:]) != self.shape:
            raise ValueError(
                f"{type(self).__name__}.update: the value target's trailing dims do not match"
                f" the normaliser (got shape {tuple(value_target.shape)}; expected trailing dims"
                f" {self.shape}). Pass targets shaped [*batch, {', '.join(map(str, self.shape))}]"
                " or build the normaliser with shape= the value's per-element shape."
            )
        return tuple(range(lead))


class PopArtValueNorm(ValueNorm):
    """PopArt normaliser: debiased moving averages of the target's mean and mean of squares.

    After each :meth:`update` with batch mean ``m`` and mean of squares ``q``:
    ``running_mean = beta * running_mean + (1 - beta) * m`` (same for ``running_mean_sq``) and
    ``debiasing_term = beta * debiasing_term + (1 - beta)``. The statistics are the buffers
    divided by ``max(debiasing_term, epsilon)``, so the zero start does not bias them; the
    variance is ``max(mean_sq - mean**2, epsilon)``.

    Keyword Args:
        shape: per-element shape of the value. Defaults to ``1``.
        beta: decay of the moving averages (closer to 1 adapts slower). Defaults to
            ``0.99999`` (MAPPO's value).
        epsilon: floor of the debiasing term and of the variance. Defaults to ``1e-5``.
        device: where the buffers are created.

    Examples:
        >>> vn = PopArtValueNorm(shape=1, beta=0.9)
        >>> vn.update(torch.tensor([[1.0], [3.0]]))
        >>> vn.normalize(torch.tensor([[2.0], [4.0]])).flatten().tolist()
        [0.0, 2.0]
        >>> vn.denormalize(torch.tensor([[1.0]])).item()
        3.0
    """

    running_mean: torch.Tensor
    running_mean_sq: torch.Tensor
    debiasing_term: torch.Tensor

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        beta: float = 0.99999,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        self.beta = beta
        self.register_buffer("running_mean", torch.zeros(self.shape, device=device))
        self.register_buffer("running_mean_sq", torch.zeros(self.shape, device=device))
        self.register_buffer("debiasing_term", torch.zeros((), device=device))

    def _stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        debias = self.debiasing_term.clamp(min=self.epsilon)
        mean = self.running_mean / debias
        var = (self.running_mean_sq / debias - mean.pow(2)).clamp(min=self.epsilon)
        return mean, var

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Moves the averages towards the batch's mean and mean of squares (no gradient)."""
        value_target = value_target.detach()
        dims = self._reduce_dims(value_target)
        squares = value_target.pow(2)
        batch_mean = value_target.mean(dim=dims) if dims else value_target
        batch_mean_sq = squares.mean(dim=dims) if dims else squares
        weight = 1.0 - self.beta
        self.running_mean.mul_(self.beta).add_(batch_mean, alpha=weight)
        self.running_mean_sq.mul_(self.beta).add_(batch_mean_sq, alpha=weight)
        self.debiasing_term.mul_(self.beta).add_(weight)

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """Returns ``(value_target - mean) / std`` (differentiable in ``value_target``)."""
        mean, var = self._stats()
        return (value_target - mean) / var.sqrt()

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """Returns ``normalised_value * std + mean``."""
        mean, var = self._stats()
        return normalised_value * var.sqrt() + mean

    def scale(self) -> torch.Tensor:
        """The running standard deviation."""
        return self._stats()[1].sqrt()


class RunningValueNorm(ValueNorm):
    """Exact running mean and population variance of every target seen (no decay).

    Batches are merged with the parallel (Chan et al.) form of Welford's update: buffers
    ``mean``, ``m2`` (sum of squared deviations) and ``count``. The variance is
    ``max(m2 / max(count, 1), epsilon)``.

    Keyword Args:
        shape: per-element shape of the value. Defaults to ``1``.
        epsilon: floor of the variance. Defaults to ``1e-5``.
        device: where the buffers are created.

    Examples:
        >>> vn = RunningValueNorm(shape=1)
        >>> vn.update(torch.tensor([[1.0], [3.0]]))
        >>> vn.update(torch.tensor([[5.0], [7.0]]))
        >>> vn.mean.item(), vn.count.item(), vn.scale().pow(2).item()
        (4.0, 4.0, 5.0)
        >>> vn.normalize(torch.tensor([[4.0]])).item()
        0.0
    """

    mean: torch.Tensor
    m2: torch.Tensor
    count: torch.Tensor

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        self.register_buffer("mean", torch.zeros(self.shape, device=device))
        self.register_buffer("m2", torch.zeros(self.shape, device=device))
        self.register_buffer("count", torch.zeros((), device=device))

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Merges the batch's count, mean and variance into the running ones (no gradient)."""
        value_target = value_target.detach()
        dims = self._reduce_dims(value_target)
        if dims:
            # A Python float count: no small tensor and no device sync per update.
            batch_count = float(math.prod(value_target.shape[d] for d in dims))
            batch_mean = value_target.mean(dim=dims)
            batch_var = value_target.var(dim=dims, unbiased=False)
        else:
            batch_count = 1.0
            batch_mean = value_target
            batch_var = torch.zeros_like(value_target)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.m2.copy_(
            self.m2 + batch_var * batch_count + delta.pow(2) * (self.count * batch_count / total)
        )
        self.mean.copy_(self.mean + delta * (batch_count / total))
        self.count.copy_(total)

    def _var(self) -> torch.Tensor:
        return (self.m2 / self.count.clamp(min=1.0)).clamp(min=self.epsilon)

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """Returns ``(value_target - mean) / std`` (differentiable in ``value_target``)."""
        return (value_target - self.mean) / self._var().sqrt()

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """Returns ``normalised_value * std + mean``."""
        return normalised_value * self._var().sqrt() + self.mean

    def scale(self) -> torch.Tensor:
        """The running standard deviation."""
        return self._var().sqrt()


class PercentileValueNorm(ValueNorm):
    """Moving averages of a low and a high quantile of the targets (DreamerV3's normaliser).

    Each :meth:`update` moves the ``low``/``high`` buffers towards the batch's quantiles:
    ``low += rate * (q_low - low)``. :meth:`scale` is ``max(high - low, min_scale)``: large
    returns are scaled down, small or noisy ones are not blown up. :meth:`normalize` only
    divides by the scale (advantages are already centred); with ``center=True`` it subtracts
    ``low`` first, mapping the tracked range onto ``[0, 1]``.

    Keyword Args:
        shape: per-element shape of the value. Defaults to ``1``.
        quantiles: the ``(low, high)`` quantiles tracked, ``0 <= low < high <= 1``. Defaults to
            ``(0.05, 0.95)``.
        rate: step towards the batch quantiles, in ``[0, 1]``. Defaults to ``0.01``.
        min_scale: lower bound of the scale, positive. Defaults to ``1.0``.
        center: subtract ``low`` in :meth:`normalize` (and add it back in
            :meth:`denormalize`). Defaults to ``False``.
        epsilon: kept for the common interface; unused (``min_scale`` bounds the divisor).
        device: where the buffers are created.

    Raises:
        ValueError: quantiles, rate or min_scale out of range.

    Examples:
        >>> vn = PercentileValueNorm(shape=1, rate=1.0)
        >>> vn.update(torch.linspace(0.0, 100.0, steps=101).unsqueeze(-1))
        >>> vn.scale().tolist(), vn.normalize(torch.tensor([45.0])).tolist()
        ([90.0], [0.5])
    """

    low: torch.Tensor
    high: torch.Tensor
    _q: torch.Tensor

    def __init__(
        self,
        *,
        shape: int | tuple[int, ...] = 1,
        quantiles: tuple[float, float] = (0.05, 0.95),
        rate: float = 0.01,
        min_scale: float = 1.0,
        center: bool = False,
        epsilon: float = 1e-5,
        device: DeviceLike = None,
    ) -> None:
        super().__init__(shape=shape, epsilon=epsilon, device=device)
        low, high = (float(q) for q in quantiles)
        if not 0.0 <= low < high <= 1.0:
            raise ValueError(
                f"PercentileValueNorm.__init__: quantiles out of range (got {quantiles!r};"
                " expected (low, high) with 0 <= low < high <= 1). Pass e.g. (0.05, 0.95)."
            )
        if not 0.0 <= rate <= 1.0:
            raise ValueError(
                f"PercentileValueNorm.__init__: rate out of range (got {rate!r}; expected"
                " 0 <= rate <= 1). Pass the EMA step, e.g. 0.01."
            )
        if min_scale <= 0:
            raise ValueError(
                f"PercentileValueNorm.__init__: min_scale must be positive (got {min_scale!r};"
                " expected > 0). Pass e.g. 1.0."
            )
        self.quantiles = (low, high)
        self.rate = rate
        self.min_scale = min_scale
        self.center = center
        self.register_buffer("low", torch.zeros(self.shape, device=device))
        self.register_buffer("high", torch.zeros(self.shape, device=device))
        self.register_buffer("_q", torch.tensor([low, high], device=device), persistent=False)

    @torch.no_grad()
    def update(self, value_target: torch.Tensor) -> None:
        """Moves ``low``/``high`` towards the batch's quantiles (no gradient)."""
        value_target = value_target.detach()
        self._reduce_dims(value_target)
        flat = value_target.reshape(-1, *self.shape).to(self.low.dtype)
        batch_low, batch_high = torch.quantile(flat, self._q.to(flat), dim=0)
        self.low.lerp_(batch_low, self.rate)
        self.high.lerp_(batch_high, self.rate)

    def normalize(self, value_target: torch.Tensor) -> torch.Tensor:
        """Returns ``value_target / scale`` (``(value_target - low) / scale`` when centred)."""
        if self.center:
            return (value_target - self.low) / self.scale()
        return value_target / self.scale()

    def denormalize(self, normalised_value: torch.Tensor) -> torch.Tensor:
        """Returns ``normalised_value * scale`` (plus ``low`` when centred)."""
        if self.center:
            return normalised_value * self.scale() + self.low
        return normalised_value * self.scale()

    def scale(self) -> torch.Tensor:
        """``max(high - low, min_scale)``."""
        return (self.high - self.low).clamp_min(self.min_scale)
