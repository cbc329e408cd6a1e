"""A stable, loop-free evaluation of the linear reverse recursion behind every return.

All returns and advantages in :mod:`tdrl.objectives.value.functional` reduce to

    y_t = x_t + a_t * (1 - reset_t) * y_{t+1},    y_T = 0,

which unrolls to ``y_t = sum_{s >= t, same segment} (prod_{k=t}^{s-1} a_k) x_s``. Writing the
products as ``exp(L_s - L_t)`` with ``L`` the exclusive cumulative sum of ``log a`` turns the
recursion into one reverse cumulative sum of ``exp(L_s) x_s`` followed by a rescale with
``exp(-L_t)``; a segment ends at each reset, so the sum past the next reset is subtracted.

Why it is stable:

- The sums run in float64 and the log-decay keeps running across resets, so everything that is
  subtracted is smaller than the kept part by the discount from ``t`` to the reset: the error
  stays at float64 rounding times the discounted magnitude of the inputs.
- ``exp(+-L)`` must not overflow: when ``T * max|log a|`` exceeds :data:`_MAX_LOG_RANGE` the time
  axis is cut into chunks short enough to stay in range, each chunk is scanned as above and the
  value at each chunk start is carried backwards with one small loop over the chunks (only
  needed for discounts below ~0.3 at T=512).
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

__all__ = ["reverse_discounted_cumsum"]

# exp(+-600) ~ 1e+-260: far from float64 overflow (1e308) even when multiplied by float32 data.
_MAX_LOG_RANGE = 600.0


def reverse_discounted_cumsum(
    x: Tensor,
    discount: float | Tensor,
    *,
    reset: Tensor | None = None,
    time_dim: int = -2,
) -> Tensor:
    """Computes ``y_t = x_t + discount_t * (1 - reset_t) * y_{t+1}`` along ``time_dim``.

    The recursion starts from ``y_T = 0`` after the last step. It is evaluated without a Python
    loop over time, in float64, and is stable for long sequences, discounts close to one and
    many resets (see the module notes); the stability guarantee assumes ``discount <= 1``. The
    result has the dtype of ``x``.

    Args:
        x: the per-step terms, shape ``[*B, T, *F]`` with ``T`` at ``time_dim``.
        discount: a non-negative float or a tensor broadcastable to ``x`` (``a_t``).
        reset: boolean tensor broadcastable to ``x``; ``True`` at step ``t`` stops the sum at
            ``t`` (``y_t = x_t``). ``None`` means no reset.
        time_dim: the time dimension of ``x``.

    Returns:
        A tensor shaped like ``x``.

    Examples:
        >>> import torch
        >>> x = torch.ones(4, 1)
        >>> reset = torch.tensor([[False], [True], [False], [False]])
        >>> reverse_discounted_cumsum(x, 0.5, reset=reset).squeeze(-1)
        tensor([1.5000, 1.0000, 1.5000, 1.0000])
    """
    dim = _check_dim("reverse_discounted_cumsum", time_dim, x.ndim)
    steps = x.shape[dim]
    if reset is not None and reset.dtype is not torch.bool:
        reset = reset != 0
    if steps == 0:
        return x.clone()
    log_step: float | None = None
    if isinstance(discount, Tensor) and discount.ndim == 0 and not discount.requires_grad:
        if discount.device.type == "cpu":
            discount = float(discount)
    if not isinstance(discount, Tensor):
        discount = float(discount)
        if not discount >= 0.0 or math.isinf(discount):
            raise ValueError(
                "reverse_discounted_cumsum: discount must be finite and non-negative "
                f"(got {discount}). Pass gamma (and lmbda) in [0, 1]."
            )
        if discount == 0.0:
            return x.clone()
        log_step = math.log(discount)
    if reset is None:
        reset = torch.zeros((), dtype=torch.bool, device=x.device)
    reset = reset.expand(x.shape)
    if log_step is not None and abs(log_step) * steps <= _MAX_LOG_RANGE:
        return _scan_constant(x, log_step, reset, dim).to(x.dtype)
    if log_step is not None:
        log_a = torch.full(x.shape, log_step, dtype=torch.float64, device=x.device)
    else:
        assert isinstance(discount, Tensor)
        a = discount.to(torch.float64).expand(x.shape)
        positive = a > 0
        # log(1) where a == 0: the reset makes the value irrelevant and keeps gradients finite.
        log_a = torch.log(torch.where(positive, a, torch.ones((), dtype=a.dtype, device=a.device)))
        reset = reset | ~positive
    max_log = float(log_a.detach().abs().amax()) if log_a.numel() else 0.0
    if max_log * steps <= _MAX_LOG_RANGE:
        cum_log = torch.cumsum(log_a, dim) - log_a
        return _scan(x, cum_log, reset, dim).to(x.dtype)
    chunk = max(1, int(_MAX_LOG_RANGE // max_log))
    return _scan_chunked(x, log_a, reset, dim, chunk)


def _check_dim(fn: str, time_dim: int, ndim: int) -> int:
    if not -ndim <= time_dim < ndim:
        raise ValueError(
            f"{fn}: time_dim is out of range (got time_dim={time_dim} for tensors with {ndim} "
            f"dims; expected -{ndim} <= time_dim < {ndim}). Pass the index of the time dimension, "
            "e.g. time_dim=-2 for [*B, T, 1]."
        )
    return time_dim % ndim


def _along(vec: Tensor, dim: int, ndim: int) -> Tensor:
    """Views a 1-d tensor so that it broadcasts along ``dim`` of an ``ndim`` tensor."""
    return vec.view((-1,) + (1,) * (ndim - dim - 1))


@functools.lru_cache(maxsize=32)
def _constant_weights(
    steps: int, log_step: float, trailing: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """Reversed-order weights ``exp(+-L)`` and positions, cached: they only depend on the key."""
    # Normal tensors even when first called in inference mode: autograd may save them later.
    with torch.inference_mode(False):
        # cum_log at original step t = T - 1 - j in reversed coordinates j.
        rev = torch.arange(steps - 1, -1, -1, dtype=torch.float64, device=device) * log_step
        shape = (-1,) + (1,) * trailing
        pos = torch.arange(steps, device=device).view(shape)
        return torch.exp(rev).view(shape), torch.exp(-rev).view(shape), pos


def _scan_constant(x: Tensor, log_step: float, reset: Tensor, dim: int) -> Tensor:
    """Single-pass scan when the discount is one float; works in time-reversed order."""
    weight, inv_weight, pos = _constant_weights(x.shape[dim], log_step, x.ndim - dim - 1, x.device)
    return _reversed_core(x.flip(dim) * weight, inv_weight, reset.flip(dim), pos, dim)


def _scan(x: Tensor, cum_log: Tensor, reset: Tensor, dim: int) -> Tensor:
    """Single-pass scan with per-element exclusive log-decays ``cum_log`` (float64)."""
    cum_rev = cum_log.flip(dim)
    pos = _along(torch.arange(x.shape[dim], device=x.device), dim, x.ndim)
    return _reversed_core(
        x.flip(dim) * torch.exp(cum_rev), torch.exp(-cum_rev), reset.flip(dim), pos, dim
    )


def _reversed_core(
    xw_rev: Tensor, inv_weight_rev: Tensor, reset_rev: Tensor, pos: Tensor, dim: int
) -> Tensor:
    """Segmented sum on time-reversed, pre-weighted terms; returns the result in original order."""
    total = torch.cumsum(xw_rev, dim)
    # In reversed order the segment of step j starts at the last reset at or before j; the sum
    # accumulated before that reset belongs to later steps and is subtracted. The exclusive sum
    # at position 0 is exactly zero, which also covers "no reset before j".
    start = torch.where(reset_rev, pos, 0).cummax(dim).values
    before = (total - xw_rev).gather(dim, start)
    return ((total - before) * inv_weight_rev).flip(dim)


def _scan_chunked(x: Tensor, log_a: Tensor, reset: Tensor, dim: int, chunk: int) -> Tensor:
    """Scans chunks of ``chunk`` steps independently, then carries values across chunk edges."""
    x64 = x.movedim(dim, -1).to(torch.float64)
    log_a = log_a.movedim(dim, -1)
    reset = reset.movedim(dim, -1)
    steps = x64.shape[-1]
    n_chunks = -(-steps // chunk)
    pad = n_chunks * chunk - steps
    if pad:
        x64 = torch.nn.functional.pad(x64, (0, pad))
        log_a = torch.nn.functional.pad(log_a, (0, pad))
        reset = torch.nn.functional.pad(reset, (0, pad), value=True)
    shape = (*x64.shape[:-1], n_chunks, chunk)
    x64, log_a, reset = x64.reshape(shape), log_a.reshape(shape), reset.reshape(shape)
    cum_log = torch.cumsum(log_a, -1)
    total_log = cum_log[..., -1:]
    cum_log = cum_log - log_a
    local = _scan(x64, cum_log, reset, x64.ndim - 1)
    # open[i]: no reset in [i, chunk - 1], so the value at the next chunk start flows back to i.
    open_ = ~torch.flip(torch.cummax(torch.flip(reset, (-1,)), -1).values, (-1,))
    decay_to_edge = torch.where(open_, torch.exp(total_log - cum_log), 0.0)
    carry = torch.zeros_like(local[..., 0])
    edge_decay = decay_to_edge[..., 0]
    nxt = torch.zeros_like(local[..., 0, 0])
    for j in range(n_chunks - 1, -1, -1):
        carry[..., j] = nxt
        nxt = local[..., j, 0] + edge_decay[..., j] * nxt
    out = local + decay_to_edge * carry.unsqueeze(-1)
    out = out.reshape(*out.shape[:-2], n_chunks * chunk)[..., :steps]
    return out.movedim(-1, dim).to(x.dtype)
