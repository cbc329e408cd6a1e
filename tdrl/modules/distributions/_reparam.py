"""Straight-through gradient strategies for one-hot samples."""

from __future__ import annotations

import math
from enum import Enum

import torch
from torch import Tensor

__all__ = ["ReparamGradientStrategy"]


class ReparamGradientStrategy(str, Enum):
    """How ``rsample()`` of a one-hot distribution lets gradients reach the logits.

    Both strategies return an exactly one-hot tensor in the forward pass; they differ in the
    surrogate used by the backward pass:

    - ``PassThrough``: the one-hot draw plus ``probs - probs.detach()``, so the gradient is
      the gradient of the class probabilities (straight-through estimator).
    - ``RelaxedOneHot``: a Gumbel-softmax sample ``softmax((logits + g) / temperature)`` is
      drawn, the forward value is the one-hot of its argmax, and the gradient flows through
      the relaxed sample (straight-through Gumbel-softmax). Lower temperatures give a less
      biased but noisier gradient.

    Distributions accept the member or its name (``"PassThrough"``, ``"RelaxedOneHot"``).

    Examples:
        >>> ReparamGradientStrategy("RelaxedOneHot") is ReparamGradientStrategy.RelaxedOneHot
        True
        >>> ReparamGradientStrategy.PassThrough.value
        'PassThrough'
    """

    PassThrough = "PassThrough"
    RelaxedOneHot = "RelaxedOneHot"


def _resolve_grad_method(
    value: ReparamGradientStrategy | str, owner: str
) -> ReparamGradientStrategy:
    if isinstance(value, ReparamGradientStrategy):
        return value
    if isinstance(value, str):
        for member in ReparamGradientStrategy:
            if member.value == value:
                return member
    allowed = ", ".join(repr(m.value) for m in ReparamGradientStrategy)
    raise ValueError(
        f"{owner}: unknown grad_method (got {value!r}; expected a ReparamGradientStrategy or one "
        f"of {allowed}). Pass e.g. grad_method=ReparamGradientStrategy.PassThrough."
    )


def _check_temperature(value: float, owner: str) -> float:
    temperature = float(value)
    if not temperature > 0.0:
        raise ValueError(
            f"{owner}: temperature must be positive (got {value!r}; expected > 0). "
            "Pass e.g. temperature=1.0."
        )
    return temperature


def _one_hot_rsample(
    logits: Tensor,
    probs: Tensor,
    allowed: Tensor,
    draw: Tensor | None,
    strategy: ReparamGradientStrategy,
    temperature: float,
    sample_shape: torch.Size,
) -> Tensor:
    """Draws exactly one-hot samples whose gradient follows ``strategy``.

    ``allowed`` marks the classes that may be returned, and ``draw`` holds the category
    indices for ``PassThrough`` (ignored by ``RelaxedOneHot``, which draws its own Gumbel
    noise).
    """
    shape = sample_shape + logits.shape
    num_classes = logits.shape[-1]
    if strategy is ReparamGradientStrategy.PassThrough:
        if draw is None:
            raise RuntimeError("_one_hot_rsample: PassThrough needs the drawn indices.")
        hard = torch.nn.functional.one_hot(draw, num_classes).to(probs.dtype)
        # Parenthesised so that the forward value is exactly ``hard``: ``probs - probs``
        # is exactly 0, whereas ``(hard + probs) - probs`` may round.
        return hard + (probs.expand(shape) - probs.detach().expand(shape))
    # Forbidden classes (masked, or given as probs=0, whose logits torch clamps to a finite
    # value) must never win the argmax below.
    logits = logits.masked_fill(~allowed, -math.inf)
    # Gumbel noise as -log(E), E ~ Exp(1); the clamp keeps E = 0 from giving +inf (then nan).
    tiny = torch.finfo(logits.dtype).tiny
    exp_noise = torch.empty(shape, dtype=logits.dtype, device=logits.device).exponential_()
    gumbel = -exp_noise.clamp_min(tiny).log()
    soft = torch.softmax((logits + gumbel) / temperature, dim=-1)
    # argmax of logits + noise, not of ``soft``: identical in exact arithmetic, and it can
    # never pick an impossible (-inf) outcome even when ``soft`` underflows to all zeros.
    index = (logits + gumbel).argmax(dim=-1)
    hard = torch.nn.functional.one_hot(index, num_classes).to(soft.dtype)
    return hard + (soft - soft.detach())
