"""Multi-agent trainer base: per-group training and evaluation returns on the Trainer's run."""

from __future__ import annotations

from typing import Any

from tdrl.envs import EnvBase
from tdrl.errors import CheckpointError
from tdrl.train._eval import EpisodeTracker, evaluate_returns
from tdrl.train._multiagent_models import find_groups
from tdrl.train._trainer import Trainer

__all__ = ["MultiAgentTrainer"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class MultiAgentTrainer(Trainer):
    """The run machinery of :class:`Trainer` with returns per agent group.

    The return of a group over an episode is the sum over the episode's steps of the group's
    **mean per-agent reward** (so it does not grow with the number of agents, and it equals the
    team reward when the agents share one). An episode ends with the env's root ``"done"``.
    Each row of ``metrics.csv`` gets ``train_return/<group>`` (the mean over the last 20
    finished training episodes) and ``eval_return/<group>`` (the mean over the deterministic
    evaluation episodes); ``train_return`` and ``eval_return`` are the mean over the groups
    (the group's own with one group), which the progress bar, ``eval.target_return``,
    ``best_eval_return`` and ``tdrl eval`` use. ``summary.json`` adds
    ``final_eval_return/<group>`` and ``recent_train_return/<group>``, and the learning curve
    draws one set of curves per group.

    Subclasses build the networks for ``self.groups`` and write ``_train()``.
    """

    def __init__(self, config: dict[str, Any], out_dir: Any, **kwargs: Any) -> None:
        super().__init__(config, out_dir, **kwargs)
        self.groups = find_groups(self.env, f"tdrl train {config['algorithm']}")
        self.trackers = {
            g.name: EpisodeTracker(g.key("reward"), "done", reduce="mean") for g in self.groups
        }
        self._recent_groups: dict[str, list[float]] = {g.name: [] for g in self.groups}
        self.last_group_eval: dict[str, float] = {}

    # ------------------------------------------------------------------ returns
    def group_returns(self, env: EnvBase) -> dict[str, list[float]]:
        """Each group's deterministic return of one episode per member of ``env``."""
        max_steps = int(self.config.get("eval", {}).get("max_steps", 10_000))
        rewards = {g.name: g.key("reward") for g in self.groups}
        return evaluate_returns(env, self.policy, rewards, reduce="mean", max_steps=max_steps)

    def episode_returns(self, env: EnvBase) -> list[float]:
        """The mean over the groups of :meth:`group_returns`, per episode."""
        per_group = list(self.group_returns(env).values())
        return [_mean(list(values)) for values in zip(*per_group)]

    def _evaluate(self) -> float:
        per_group = self.group_returns(self.eval_env)
        self.last_group_eval = {name: _mean(values) for name, values in per_group.items()}
        return self._record_eval([_mean(list(v)) for v in zip(*per_group.values())])

    def _eval_columns(self) -> dict[str, float]:
        mean = self._evaluate()
        return {
            "eval_return": mean,
            **{f"eval_return/{g}": v for g, v in self.last_group_eval.items()},
        }

    def _train_columns(self, batch: Any) -> dict[str, float]:
        """As the Trainer's, per group: the columns of a batch in which episodes finished
        (every group finishes its episodes with the root done, so they finish together)."""
        finished = {name: tracker.update(batch) for name, tracker in self.trackers.items()}
        row: dict[str, float] = {}
        for name, values in finished.items():
            recent = self._recent_groups[name]
            recent.extend(values)
            del recent[:-100]
            if values:
                row[f"train_return/{name}"] = _mean(recent[-20:])
        if not row:
            return {}
        # the scalar return of an episode is the mean over the groups of their returns
        self._recent.extend(_mean(list(episode)) for episode in zip(*finished.values()))
        del self._recent[:-100]
        return {"train_return": _mean(self._recent[-20:]), **row}

    def _episode_trackers(self) -> dict[str, EpisodeTracker]:
        return {f"group.{name}": tracker for name, tracker in self.trackers.items()}

    def summary(self) -> dict[str, Any]:
        """The trainer's summary with the per-group returns and the groups' sizes."""
        out = super().summary()
        out["groups"] = {g.name: g.n_agents for g in self.groups}
        for g in self.groups:
            recent = self._recent_groups[g.name][-20:]
            out[f"final_eval_return/{g.name}"] = self.last_group_eval.get(g.name)
            out[f"recent_train_return/{g.name}"] = _mean(recent) if recent else None
        return out

    # ------------------------------------------------------------------ checkpoints
    def _counters(self) -> dict[str, Any]:
        return {
            **super()._counters(),
            "recent_groups": {k: v[-100:] for k, v in self._recent_groups.items()},
            "last_group_eval": dict(self.last_group_eval),
        }

    def _read_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        recent = counters.get("recent_groups", {})
        last = counters.get("last_group_eval", {})
        names = sorted(self._recent_groups)
        if not isinstance(recent, dict) or sorted(recent) != names:
            raise CheckpointError(  # a mismatch with the config, not a corrupted file
                f"load_checkpoint: the checkpoint's groups differ from the env's (got "
                f"{recent!r:.80}; expected the groups {names}). Resume with the run's own config."
            )
        return {
            **super()._read_counters(counters),
            "recent_groups": {k: [float(x) for x in v] for k, v in recent.items()},
            "last_group_eval": {str(k): float(v) for k, v in dict(last).items()},
        }

    def _apply_counters(self, values: dict[str, Any]) -> None:
        super()._apply_counters(values)
        self._recent_groups = values["recent_groups"]
        self.last_group_eval = values["last_group_eval"]
