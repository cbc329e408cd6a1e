"""Deterministic evaluation: every env member plays one full episode."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDictBase

from tdrl.envs import EnvBase
from tdrl.modules import ExplorationType, set_exploration_type

__all__ = ["EpisodeTracker", "evaluate"]


@torch.no_grad()
def evaluate(
    env: EnvBase,
    policy: Callable[[TensorDictBase], TensorDictBase],
    *,
    max_steps: int = 10_000,
    exploration: ExplorationType = ExplorationType.DETERMINISTIC,
) -> list[float]:
    """Runs the policy until each member of ``env`` finished one episode; returns the returns.

    Examples:
        >>> from tdrl.envs import CartPoleEnv
        >>> env = CartPoleEnv(batch_size=(3,))
        >>> len(evaluate(env, env.rand_action))
        3
    """
    td = env.reset()
    reward_key, done_key = env.reward_keys[0], env.done_groups[0].done
    n = max(env.batch_size.numel(), 1)
    total = torch.zeros(n)
    alive = torch.ones(n, dtype=torch.bool)
    with set_exploration_type(exploration):
        for _ in range(max_steps):
            td = env.step(policy(td))
            reward = td.get(("next", *_t(reward_key))).reshape(n, -1).sum(-1).float()
            done = td.get(("next", *_t(done_key))).reshape(n, -1).any(-1)
            total += reward * alive
            alive &= ~done
            if not alive.any():
                break
            td = env.maybe_reset(env.step_mdp(td))
    return total.tolist()


def _t(key: object) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)  # type: ignore[arg-type]


class EpisodeTracker:
    """Turns collected ``[*B, T]`` batches into finished-episode returns (vectorised over B).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> tracker = EpisodeTracker()
        >>> batch = TensorDict({"next": {"reward": torch.ones(2, 3, 1),
        ...     "done": torch.tensor([[[False], [True], [False]], [[False]] * 3])}}, [2, 3])
        >>> tracker.update(batch)
        [2.0]
    """

    def __init__(self, reward_key: object = "reward", done_key: object = "done") -> None:
        self.reward_key = ("next", *_t(reward_key))
        self.done_key = ("next", *_t(done_key))
        self._running: torch.Tensor | None = None

    def update(self, batch: TensorDictBase) -> list[float]:
        """Adds a batch; returns the returns of the episodes that finished in it."""
        reward = batch.get(self.reward_key)
        done = batch.get(self.done_key)
        steps = batch.batch_size[-1]
        r = reward.reshape(*batch.batch_size, -1).sum(-1).reshape(-1, steps).float()
        d = done.reshape(*batch.batch_size, -1).any(-1).reshape(-1, steps)
        if self._running is None or self._running.shape[0] != r.shape[0]:
            self._running = torch.zeros(r.shape[0])
        finished: list[float] = []
        running = self._running
        for t in range(steps):
            running += r[:, t]
            if d[:, t].any():
                finished.extend(running[d[:, t]].tolist())
                running[d[:, t]] = 0.0
        return finished
