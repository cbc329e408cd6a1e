"""MaskedActionEnv: a cue-matching task whose legal actions change at every step."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.builtin._common import (
    action_index,
    discrete_action_spec,
    kept_done_flags,
    make_generator,
    move_state,
    read_mask,
    seed_generator,
)
from tdrl.envs.core import EnvBase
from tdrl.specs import Binary, Bounded, Composite, Unbounded

__all__ = ["MaskedActionEnv"]


class MaskedActionEnv(EnvBase):
    """Pick the cued action among the currently legal ones; illegal actions end the episode.

    At every step the env shows a cue (one of ``n_actions`` indices, one-hot in
    ``"observation"``) and a fresh random set of legal actions in ``"action_mask"`` (the cued
    action is always legal, every other one with probability ``legal_prob``). Choosing the cue
    earns 1, another legal action 0, and an illegal action earns -1 and terminates the episode.
    Episodes are truncated after ``max_steps`` steps. A policy that reads the cue scores
    ``max_steps``; one that respects the mask never terminates.

    The env keeps the mask of its action spec up to date (after every reset and step), so
    ``rand_action``, ``rollout()`` without a policy and any sampler of ``env.action_spec`` only
    draw legal actions.

    Entries (``n = n_actions``):

    - ``"observation"``: ``[*B, n]`` float32 one-hot cue.
    - ``"action_mask"``: ``[*B, n]`` bool, True = legal (in the observation spec).
    - ``"action"``: ``OneHot(n)`` of shape ``[*B, n]`` (int64) by default, or with
      ``categorical_action_encoding=True`` a ``Categorical(n)`` index of shape ``[*B]``.
    - ``"reward"``: ``[*B, 1]``. ``"done"``/``"terminated"``/``"truncated"``: ``[*B, 1]``.

    Args:
        batch_size: number of independent copies, as leading dims.
        device: where the state and data live.
        n_actions: number of actions (and cues).
        max_steps: truncation horizon.
        legal_prob: probability that a non-cued action is legal at a step.
        categorical_action_encoding: use index actions instead of one-hot ones.

    Examples:
        >>> env = MaskedActionEnv(batch_size=(3,), n_actions=4)
        >>> data = env.rollout(8)
        >>> bool((data["next", "reward"] >= 0).all()), data.batch_size
        (True, torch.Size([3, 8]))
    """

    def __init__(
        self,
        batch_size: Sequence[int] | torch.Size = (),
        device: torch.device | str | None = None,
        *,
        n_actions: int = 5,
        max_steps: int = 16,
        legal_prob: float = 0.5,
        categorical_action_encoding: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        if n_actions < 2 or max_steps < 1 or not 0.0 <= legal_prob <= 1.0:
            raise ValueError(
                f"MaskedActionEnv.__init__: invalid settings (got n_actions={n_actions}, "
                f"max_steps={max_steps}, legal_prob={legal_prob}; expected n_actions >= 2, "
                "max_steps >= 1, 0 <= legal_prob <= 1). Fix the arguments."
            )
        self.n_actions = int(n_actions)
        self.max_steps = int(max_steps)
        self.legal_prob = float(legal_prob)
        self.categorical_action_encoding = categorical_action_encoding
        b, n, dev = self.batch_size, self.n_actions, self.device
        self.full_observation_spec = Composite(
            observation=Bounded(0.0, 1.0, shape=(*b, n), device=dev),
            action_mask=Binary(n, shape=(*b, n), device=dev, dtype=torch.bool),
            shape=b,
        )
        self.action_spec = discrete_action_spec(n, b, dev, categorical_action_encoding)
        self.reward_spec = Unbounded(shape=(*b, 1), device=dev)
        self.full_done_spec = self.default_done_spec()
        self._rng = make_generator(dev)
        self._cue = torch.zeros(b, dtype=torch.int64, device=dev)
        self._legal = torch.ones((*b, n), dtype=torch.bool, device=dev)
        self._steps = torch.zeros((*b, 1), dtype=torch.int64, device=dev)

    def _draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, dev = self.batch_size, self.n_actions, self._cue.device
        cue = torch.randint(0, n, b, generator=self._rng, device=dev)
        legal = torch.rand((*b, n), generator=self._rng, device=dev) < self.legal_prob
        legal.scatter_(-1, cue.unsqueeze(-1), True)
        return cue, legal

    def _observation(self) -> dict[str, torch.Tensor]:
        # the spec holds a view of the current mask (self._legal is replaced, never mutated)
        self.full_action_spec["action"].update_mask(self._legal)  # type: ignore[attr-defined]
        return {
            "observation": F.one_hot(self._cue, self.n_actions).to(torch.float32),
            "action_mask": self._legal.clone(),
        }

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        b = self.batch_size
        cue, legal = self._draw()
        mask = read_mask(tensordict, "_reset", (*b, 1))
        if mask is None:
            self._cue, self._legal = cue, legal
            self._steps = torch.zeros_like(self._steps)
            flags = {
                key: torch.zeros((*b, 1), dtype=torch.bool, device=self._cue.device)
                for key in ("done", "terminated", "truncated")
            }
        else:
            self._cue = torch.where(mask.squeeze(-1), cue, self._cue)
            self._legal = torch.where(mask, legal, self._legal)
            self._steps = torch.where(mask, 0, self._steps)
            flags = kept_done_flags(tensordict, mask)  # type: ignore[arg-type]
        data = {**self._observation(), **flags}
        return TensorDict._new_unsafe(data, batch_size=b, device=self.device)

    def _merge_reset(
        self, old: TensorDictBase, new: TensorDictBase, masks: list[torch.Tensor | None]
    ) -> TensorDictBase:
        # _reset returns every member's entries (the old ones where no reset was asked).
        return old.update(new)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        index = action_index(tensordict.get("action"), self.categorical_action_encoding)
        index = index.unsqueeze(-1)
        legal = self._legal.gather(-1, index)
        correct = (index == self._cue.unsqueeze(-1)).to(torch.float32)
        reward = correct.masked_fill_(~legal, -1.0)
        terminated = ~legal
        self._steps = self._steps + 1
        truncated = self._steps >= self.max_steps
        self._cue, self._legal = self._draw()
        data = {
            **self._observation(),
            "reward": reward,
            "done": terminated | truncated,
            "terminated": terminated,
            "truncated": truncated,
        }
        return TensorDict._new_unsafe(data, batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        seed_generator(self._rng, seed)

    def _to(self, device: torch.device) -> None:
        move_state(self, device)
