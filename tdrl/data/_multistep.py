"""N-step returns as a post-processing step of collector batches (TorchRL's ``MultiStep``)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["MultiStep"]

_DONE_KEYS = ("done", "terminated", "truncated")


def _steps_ahead(done: torch.Tensor, n_steps: int) -> torch.Tensor:
    """``k[t] = min(end[t] - t, n_steps - 1)`` where ``end[t]`` is the last step of ``t``'s
    trajectory inside the batch (the first ``t' >= t`` with ``done[t']``, else the last step)."""
    steps = done.shape[-1]
    time = torch.arange(steps, device=done.device)
    last = torch.where(done, time, torch.full_like(time, steps - 1))
    end = last.flip(-1).cummin(-1).values.flip(-1)
    return (end - time).clamp(max=n_steps - 1)


def _discounted_sum(
    reward: torch.Tensor, ahead: torch.Tensor, gamma: float, n_steps: int
) -> torch.Tensor:
    """``sum_{i <= ahead[t]} gamma**i * reward[t + i]`` along the time dim ``ahead.dim() - 1``."""
    time_dim = ahead.dim() - 1
    ahead = ahead.view(*ahead.shape, *(1,) * (reward.dim() - ahead.dim()))
    steps = reward.shape[time_dim]
    out = torch.zeros_like(reward)
    for i in range(min(n_steps, steps)):
        shifted = reward.narrow(time_dim, i, steps - i)
        keep = ahead.narrow(time_dim, 0, steps - i) >= i
        out.narrow(time_dim, 0, steps - i).add_(torch.where(keep, shifted, 0.0), alpha=gamma**i)
    return out


class MultiStep(nn.Module):
    """Turns a collector batch into n-step transitions (TorchRL's ``MultiStep``).

    For every step ``t`` of a ``[*batch, time]`` TensorDict, let ``k`` be the number of steps
    that follow ``t`` in its trajectory inside the batch, at most ``n_steps - 1`` (a trajectory
    ends at a step whose ``("next", "done")`` is set, so at termination and at truncation alike,
    and at the end of the batch). The output holds:

    - ``("next", "reward")``: ``sum_{i=0..k} gamma**i * reward[t + i]``; the one-step reward
      moves to ``("next", "original_reward")``;
    - every other ``"next"`` entry (observations, ...) taken from step ``t + k``; the done
      entries (``"done"``, ``"terminated"``, ``"truncated"``) stay those of step ``t``;
    - ``"steps_to_next_obs"``: ``k + 1`` (int64, ``[*batch, time]``);
    - ``"gamma"``: ``gamma ** (k + 1)``, the discount of the bootstrap value;
    - ``"nonterminal"``: ``k != 0`` (as TorchRL: false on the last step of each trajectory of the
      batch, and wherever ``("collector", "mask")`` is false).

    Steps near the end of a batch see fewer than ``n_steps`` rewards: trajectories are cut at
    the batch boundary. The input is not modified.

    Args:
        gamma: the discount, in ``(0, 1]``.
        n_steps: the look-ahead (``>= 1``; ``1`` leaves rewards and observations unchanged).

    Examples:
        >>> from tensordict import TensorDict
        >>> data = TensorDict({"next": {"reward": torch.ones(5, 1), "done": torch.zeros(5, 1, dtype=torch.bool), "obs": torch.arange(5)}}, [5])
        >>> out = MultiStep(gamma=0.5, n_steps=2)(data)
        >>> out["next", "reward"].squeeze(-1).tolist(), out["next", "obs"].tolist()
        ([1.5, 1.5, 1.5, 1.5, 1.0], [1, 2, 3, 4, 4])
        >>> out["gamma"].tolist(), out["steps_to_next_obs"].tolist()
        ([0.25, 0.25, 0.25, 0.25, 0.5], [2, 2, 2, 2, 1])
    """

    def __init__(self, gamma: float, n_steps: int) -> None:
        super().__init__()
        if not isinstance(n_steps, int) or isinstance(n_steps, bool) or n_steps < 1:
            raise ValueError(
                f"MultiStep.__init__: invalid n_steps (got {n_steps!r}; expected an int >= 1). "
                "Pass the number of steps to look ahead."
            )
        if not 0 < gamma <= 1:
            raise ValueError(
                f"MultiStep.__init__: invalid gamma (got {gamma!r}; expected 0 < gamma <= 1). "
                "Pass a discount factor."
            )
        self.gamma = float(gamma)
        self.n_steps = n_steps
        self.done_key = "done"
        self.done_keys = _DONE_KEYS
        self.reward_keys = ("reward",)
        self.mask_key = ("collector", "mask")

    def _done(self, tensordict: TensorDictBase) -> torch.Tensor:
        shape = tensordict.batch_size
        if not len(shape):
            raise ValueError(
                f"MultiStep.forward: the data has no time dim (got batch size {list(shape)}; "
                "expected [*batch, time]). Pass a collector batch."
            )
        keys = tensordict.keys(True, True)
        for key in (("next", self.done_key), *(("next", k) for k in self.reward_keys)):
            if key not in keys:
                raise KeyError(
                    f"MultiStep.forward: no {key!r} entry (got keys {list(keys)}). Pass a "
                    "collector batch with rewards and done flags."
                )
        done = tensordict.get(("next", self.done_key))
        if done.shape == (*shape, 1):
            done = done.squeeze(-1)
        if done.shape != shape:
            raise ValueError(
                f"MultiStep.forward: the done entry does not match the batch (got shape "
                f"{list(done.shape)}; expected {list(shape)} or {[*shape, 1]}). One done flag "
                "per step is needed."
            )
        return done.bool()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Returns the n-step version of a ``[*batch, time]`` TensorDict (a shallow copy).

        Raises:
            KeyError: if ``("next", "reward")`` or ``("next", "done")`` is missing.
            ValueError: if the data has no time dim or the done flags do not match it.
        """
        if not isinstance(tensordict, TensorDictBase):
            raise TypeError(
                f"MultiStep.forward: invalid data (got {type(tensordict).__name__}; expected a "
                "TensorDict). Pass a collector batch."
            )
        done = self._done(tensordict)
        out = tensordict.clone(False)
        ahead = _steps_ahead(done, self.n_steps)
        time = torch.arange(done.shape[-1], device=done.device)
        nxt = out.get("next")
        moved = nxt.exclude(*self.reward_keys, *self.done_keys)
        if self.n_steps > 1 and not moved.is_empty():
            moved = moved.gather(moved.batch_dims - 1, time + ahead)
        for key in self.reward_keys:
            reward = nxt.get(key)
            nxt.set("original_reward", reward)
            nxt.set(key, _discounted_sum(reward, ahead, self.gamma, self.n_steps))
        nxt.update(moved)
        steps = ahead + 1
        out.set("steps_to_next_obs", steps)
        out.set("gamma", torch.pow(torch.tensor(self.gamma, dtype=torch.float32), steps))
        nonterminal = ahead != 0
        mask = out.get(self.mask_key, None)
        if mask is not None:
            nonterminal = nonterminal & mask.reshape(nonterminal.shape).bool()
        out.set("nonterminal", nonterminal)
        return out
