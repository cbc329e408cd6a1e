"""Resetting and stepping a PettingZoo ``ParallelEnv``: every live agent acts at each step."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.envs.libs._pettingzoo_groups import GroupLayout

__all__ = ["ParallelStepper"]


class ParallelStepper:
    """Drives a ``ParallelEnv``: one ``env.step(actions)`` per tdrl step.

    Only the agents in ``env.agents`` get an action (the rows of the other agents are
    ignored). An agent's ``mask`` is whether it is still in ``env.agents`` after the step, i.e.
    whether it acts at the next step.
    """

    def __init__(self, env: Any, layout: GroupLayout, return_state: bool) -> None:
        self.env = env
        self.layout = layout
        self.return_state = return_state

    def _state(self) -> Any:
        return self.env.state() if self.return_state else None

    def reset(self, seed: int | None) -> TensorDictBase:
        obs, infos = self.env.reset(seed=seed)
        return self.layout.output(obs, infos, set(self.env.agents), state=self._state())

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self.env
        live = set(env.agents)
        actions = {}
        for group in self.layout.groups:
            values = group.actions(tensordict.get(group.action_key), live)
            for agent, value in zip(group.agents, values):
                if agent in live:
                    actions[agent] = value
        obs, rewards, terms, truncs, infos = env.step(actions)
        return self.layout.output(
            obs,
            infos,
            set(env.agents),
            rewards=rewards,
            terms=terms,
            truncs=truncs,
            state=self._state(),
        )
