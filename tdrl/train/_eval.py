"""Deterministic evaluation: every env member plays one full episode."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from tensordict import TensorDictBase

from tdrl.envs import EnvBase
from tdrl.modules import ExplorationType, set_exploration_type

__all__ = ["EpisodeTracker", "evaluate", "evaluate_returns"]

_REDUCTIONS = ("sum", "mean")


def _check_reduce(reduce: str, where: str) -> str:
    if reduce not in _REDUCTIONS:
        raise ValueError(
            f"{where}: unknown reduction (got {reduce!r}; expected one of {_REDUCTIONS}). Use "
            "'sum' for a team total or 'mean' for the mean per-agent reward."
        )
    return reduce


def _per_member(value: torch.Tensor, n: int, reduce: str) -> torch.Tensor:
    """``[*B, ...]`` -> ``[n]``: the reward (summed or averaged over its own dims) per member."""
    flat = value.reshape(n, -1).float()
    return flat.mean(-1) if reduce == "mean" else flat.sum(-1)


@torch.no_grad()
def evaluate(
    env: EnvBase,
    policy: Callable[[TensorDictBase], TensorDictBase],
    *,
    max_steps: int = 10_000,
    exploration: ExplorationType = ExplorationType.DETERMINISTIC,
) -> list[float]:
    """Runs the policy until each member of ``env`` finished one episode; returns the returns.

    The return is the sum over the episode of the env's first reward entry (summed over its
    own dims, e.g. over the agents of a group); the episode ends with the first done group's
    ``done`` (the root ``"done"`` of the built-in and wrapped envs). See
    :func:`evaluate_returns` for several reward entries at once.

    Examples:
        >>> from tdrl.envs import CartPoleEnv
        >>> env = CartPoleEnv(batch_size=(3,))
        >>> len(evaluate(env, env.rand_action))
        3
    """
    returns = evaluate_returns(
        env,
        policy,
        {"return": env.reward_keys[0]},
        done_key=env.done_groups[0].done,
        max_steps=max_steps,
        exploration=exploration,
    )
    return returns["return"]


@torch.no_grad()
def evaluate_returns(
    env: EnvBase,
    policy: Callable[[TensorDictBase], TensorDictBase],
    reward_keys: Mapping[str, object],
    *,
    done_key: object = "done",
    reduce: str = "sum",
    max_steps: int = 10_000,
    exploration: ExplorationType = ExplorationType.DETERMINISTIC,
) -> dict[str, list[float]]:
    """One episode per member of ``env``; the return of each named reward entry, per member.

    An entry's return is the sum over the episode of its reward, reduced over the reward's own
    dims with ``reduce``: ``"sum"``, or ``"mean"`` (e.g. the mean per-agent reward of a group
    ``(group, "reward")`` of shape ``[*B, n_agents, 1]``). A member's episode ends at the first
    step where ``("next", done_key)`` is true; later steps are not counted.

    Args:
        env: the (batched) env; each member plays one episode.
        policy: maps the env's data to data with actions.
        reward_keys: ``{name: reward key}``.
        done_key: the done entry that ends an episode (the root ``"done"`` by default).
        reduce: ``"sum"`` or ``"mean"`` over each reward's non-batch dims.
        max_steps: a bound on the steps played.
        exploration: the exploration type of the policy (deterministic by default).

    Examples:
        >>> from tdrl.envs import MultiAgentNavigationEnv
        >>> env = MultiAgentNavigationEnv(batch_size=(2,), n_agents=3, max_steps=5)
        >>> out = evaluate_returns(env, env.rand_action, {"agents": ("agents", "reward")},
        ...                        reduce="mean")
        >>> len(out["agents"])
        2
    """
    _check_reduce(reduce, "evaluate_returns")
    td = env.reset()
    n = max(env.batch_size.numel(), 1)
    rewards = {name: ("next", *_t(key)) for name, key in reward_keys.items()}
    done_path = ("next", *_t(done_key))
    totals = {name: torch.zeros(n) for name in rewards}
    alive = torch.ones(n, dtype=torch.bool)
    with set_exploration_type(exploration):
        for _ in range(max_steps):
            td = env.step(policy(td))
            for name, key in rewards.items():
                totals[name] += _per_member(td.get(key), n, reduce) * alive
            alive &= ~td.get(done_path).reshape(n, -1).any(-1)
            if not alive.any():
                break
            td = env.maybe_reset(env.step_mdp(td))
    return {name: total.tolist() for name, total in totals.items()}


def _t(key: object) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)  # type: ignore[arg-type]


class EpisodeTracker:
    """Turns collected ``[*B, T]`` batches into finished-episode returns (vectorised over B).

    Args:
        reward_key: the reward entry (under ``"next"``).
        done_key: the done entry that ends an episode (under ``"next"``).
        reduce: ``"sum"`` (default) or ``"mean"`` over the reward's own dims, e.g. the mean
            per-agent reward of a group entry ``[*B, T, n_agents, 1]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> tracker = EpisodeTracker()
        >>> batch = TensorDict({"next": {"reward": torch.ones(2, 3, 1),
        ...     "done": torch.tensor([[[False], [True], [False]], [[False]] * 3])}}, [2, 3])
        >>> tracker.update(batch)
        [2.0]
    """

    def __init__(
        self, reward_key: object = "reward", done_key: object = "done", *, reduce: str = "sum"
    ) -> None:
        self.reward_key = ("next", *_t(reward_key))
        self.done_key = ("next", *_t(done_key))
        self.reduce = _check_reduce(reduce, "EpisodeTracker.__init__")
        self._running: torch.Tensor | None = None

    def update(self, batch: TensorDictBase) -> list[float]:
        """Adds a batch; returns the returns of the episodes that finished in it."""
        reward = batch.get(self.reward_key)
        done = batch.get(self.done_key)
        steps = batch.batch_size[-1]
        n = batch.batch_size.numel()
        r = _per_member(reward, n, self.reduce).reshape(-1, steps)
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

    def state(self) -> torch.Tensor | None:
        """The running returns of the unfinished episodes (a copy; None before a batch)."""
        return None if self._running is None else self._running.clone()

    def check_state(self, running: object) -> None:
        """Raises ``ValueError`` unless ``running`` is a state from :meth:`state`."""
        if running is not None and not (
            isinstance(running, torch.Tensor) and running.dim() == 1 and running.is_floating_point()
        ):
            got = running if not isinstance(running, torch.Tensor) else running.shape
            raise ValueError(
                f"the episode tracker's running returns are malformed (got {got!r:.60}; "
                "expected a 1-d float tensor)"
            )

    def load_state(self, running: torch.Tensor | None) -> None:
        """Continues from :meth:`state` (episodes in progress keep their partial returns).

        Examples:
            >>> tracker = EpisodeTracker()
            >>> tracker.load_state(torch.tensor([5.0]))
            >>> from tensordict import TensorDict
            >>> tracker.update(TensorDict({"next": {"reward": torch.ones(1, 1, 1),
            ...     "done": torch.ones(1, 1, 1, dtype=torch.bool)}}, [1, 1]))
            [6.0]
        """
        self.check_state(running)
        self._running = None if running is None else running.clone().float()
