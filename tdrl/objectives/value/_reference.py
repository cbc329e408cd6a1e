"""Plain step-by-step loops for every function of :mod:`tdrl.objectives.value.functional`.

They are slow (one Python iteration per time step) and written to read like the textbook
definitions, so tests and users can use them as oracles for the vectorised versions. Signatures
match the vectorised functions. Each loop walks time backwards and keeps a running value for the
step after ``t``.

Examples:
    >>> import torch
    >>> from tdrl.objectives.value import functional
    >>> from tdrl.objectives.value._reference import td1_return_estimate_loop
    >>> reward = torch.rand(5, 1)
    >>> done = torch.zeros(5, 1, dtype=torch.bool)
    >>> torch.allclose(td1_return_estimate_loop(0.9, torch.zeros(5, 1), reward, done),
    ...                functional.td1_return_estimate(0.9, torch.zeros(5, 1), reward, done))
    True
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "generalized_advantage_estimate_loop",
    "reverse_discounted_cumsum_loop",
    "td0_return_estimate_loop",
    "td1_return_estimate_loop",
    "td_lambda_return_estimate_loop",
]


def _time_major(time_dim: int, *items: float | Tensor | None) -> list[Tensor]:
    """Broadcasts the tensors together and moves time to dim 0 (numbers become tensors)."""
    present = [x for x in items if x is not None]
    floats = [x.dtype for x in present if isinstance(x, Tensor) and x.is_floating_point()]
    dtype = floats[0] if floats else torch.get_default_dtype()
    tensors = [x if isinstance(x, Tensor) else torch.tensor(x, dtype=dtype) for x in present]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    return [t.expand(shape).movedim(time_dim, 0) for t in tensors]


def reverse_discounted_cumsum_loop(
    x: Tensor, discount: float | Tensor, *, reset: Tensor | None = None, time_dim: int = -2
) -> Tensor:
    """Loop version of ``functional.reverse_discounted_cumsum``.

    Examples:
        >>> import torch
        >>> reverse_discounted_cumsum_loop(torch.ones(3, 1), 0.5).squeeze(-1)
        tensor([1.7500, 1.5000, 1.0000])
    """
    if reset is None:
        reset = torch.zeros_like(x, dtype=torch.bool)
    x_, a_, reset_ = _time_major(time_dim, x, discount, reset)
    out = torch.empty_like(x_)
    running = torch.zeros_like(x_[0])
    for t in reversed(range(x_.shape[0])):
        running = x_[t] + torch.where(reset_[t].bool(), 0.0, a_[t] * running)
        out[t] = running
    return out.movedim(0, time_dim)


def td0_return_estimate_loop(
    gamma: float | Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    terminated: Tensor | None = None,
    *,
    done: Tensor | None = None,
) -> Tensor:
    """Loop-free by nature: ``r + gamma * V(s')`` where not terminated, ``r`` otherwise.

    Examples:
        >>> import torch
        >>> td0_return_estimate_loop(0.5, torch.ones(1, 1), torch.ones(1, 1),
        ...                          torch.zeros(1, 1, dtype=torch.bool))
        tensor([[1.5000]])
    """
    terminated = done if terminated is None else terminated
    if terminated is None:
        raise ValueError(
            "td0_return_estimate_loop: no termination flag given (got terminated=None and "
            "done=None; expected a boolean tensor). Pass terminated (or done)."
        )
    bootstrap = torch.where(terminated.bool(), 0.0, gamma * next_state_value)
    return reward + bootstrap


def td1_return_estimate_loop(
    gamma: float | Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    *,
    time_dim: int = -2,
) -> Tensor:
    """Loop version of ``functional.td1_return_estimate``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([[False], [False]])
        >>> td1_return_estimate_loop(0.5, torch.full((2, 1), 4.0), torch.ones(2, 1),
        ...                          done).squeeze(-1)
        tensor([2.5000, 3.0000])
    """
    terminated = done if terminated is None else terminated
    g, v_next, r, d, term = _time_major(time_dim, gamma, next_state_value, reward, done, terminated)
    steps = r.shape[0]
    out = torch.empty_like(r * g)
    following = torch.zeros_like(out[0])  # G_{t+1}
    for t in reversed(range(steps)):
        ends = d[t].bool() | term[t].bool() | (t == steps - 1)
        continuation = torch.where(ends, v_next[t], following)
        following = r[t] + torch.where(term[t].bool(), 0.0, g[t] * continuation)
        out[t] = following
    return out.movedim(0, time_dim)


def td_lambda_return_estimate_loop(
    gamma: float | Tensor,
    lmbda: float | Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    *,
    time_dim: int = -2,
) -> Tensor:
    """Loop version of ``functional.td_lambda_return_estimate``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([[False], [False]])
        >>> td_lambda_return_estimate_loop(0.5, 0.5, torch.full((2, 1), 4.0), torch.ones(2, 1),
        ...                                done).squeeze(-1)
        tensor([2.7500, 3.0000])
    """
    terminated = done if terminated is None else terminated
    g, lam, v_next, r, d, term = _time_major(
        time_dim, gamma, lmbda, next_state_value, reward, done, terminated
    )
    steps = r.shape[0]
    out = torch.empty_like(r * g * lam)
    following = torch.zeros_like(out[0])  # G^lambda_{t+1}
    ends = d.bool() | term.bool()
    for t in reversed(range(steps)):
        mixed = (1 - lam[t]) * v_next[t] + lam[t] * following
        continuation = torch.where(ends[t] | (t == steps - 1), v_next[t], mixed)
        following = r[t] + torch.where(term[t].bool(), 0.0, g[t] * continuation)
        out[t] = following
    return out.movedim(0, time_dim)


def generalized_advantage_estimate_loop(
    gamma: float | Tensor,
    lmbda: float | Tensor,
    state_value: Tensor,
    next_state_value: Tensor,
    reward: Tensor,
    done: Tensor,
    terminated: Tensor | None = None,
    *,
    time_dim: int = -2,
) -> tuple[Tensor, Tensor]:
    """Loop version of ``functional.generalized_advantage_estimate``.

    Examples:
        >>> import torch
        >>> done = torch.tensor([[False], [True]])
        >>> adv, target = generalized_advantage_estimate_loop(
        ...     0.5, 0.5, torch.ones(2, 1), torch.ones(2, 1), torch.ones(2, 1), done)
        >>> adv.squeeze(-1)
        tensor([0.5000, 0.0000])
    """
    terminated = done if terminated is None else terminated
    g, lam, v, v_next, r, d, term = _time_major(
        time_dim, gamma, lmbda, state_value, next_state_value, reward, done, terminated
    )
    steps = r.shape[0]
    advantage = torch.empty_like(r * g * lam * v)
    following = torch.zeros_like(advantage[0])  # A_{t+1}
    # The TD errors do not depend on each other; only the sum over time needs the loop.
    delta = r + torch.where(term.bool(), 0.0, g * v_next) - v
    # gamma * lambda, cut where the trajectory ends after step t
    decay = torch.where(d.bool() | term.bool(), 0.0, g * lam)
    for t in reversed(range(steps)):
        following = delta[t] + decay[t] * following
        advantage[t] = following
    advantage = advantage.movedim(0, time_dim)
    return advantage, advantage + state_value
