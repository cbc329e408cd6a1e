"""Resetting and stepping a PettingZoo ``AECEnv``: one agent (``agent_selection``) acts per step."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from tdrl.envs.libs._pettingzoo_groups import GroupLayout

__all__ = ["AECStepper"]


class AECStepper:
    """Drives an ``AECEnv``: one ``env.step(action)`` of the acting agent per tdrl step.

    After each step every agent still in ``env.agents`` is observed (``env.observe``), and
    ``env.rewards``, ``env.terminations``, ``env.truncations`` and ``env.infos`` are read for
    all of them. When the episode goes on, agents that are done and selected to act are then
    removed the PettingZoo way (``env.step(None)``), so the next acting agent is a live one. An
    agent's ``mask`` is whether it is ``env.agent_selection``, the agent that acts next.
    """

    def __init__(self, env: Any, layout: GroupLayout, return_state: bool) -> None:
        self.env = env
        self.layout = layout
        self.return_state = return_state

    def _state(self) -> Any:
        return self.env.state() if self.return_state else None

    def _observe(self) -> dict[str, Any]:
        env = self.env
        return {agent: env.observe(agent) for agent in env.agents}

    def reset(self, seed: int | None) -> TensorDictBase:
        env = self.env
        env.reset(seed=seed)
        return self.layout.output(
            self._observe(), env.infos, {env.agent_selection}, state=self._state()
        )

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self.env
        group, row = self.layout.where[env.agent_selection]
        agent = env.agent_selection
        env.step(group.actions(tensordict.get(group.action_key), (agent,))[row])
        obs = self._observe()
        # copies: removing dead agents below deletes their entries from these dicts
        rewards, infos = dict(env.rewards), dict(env.infos)
        terms, truncs = dict(env.terminations), dict(env.truncations)
        state = self._state()
        if not self.layout.root_done(terms, truncs):
            self._remove_dead()
        return self.layout.output(
            obs,
            infos,
            {env.agent_selection},
            rewards=rewards,
            terms=terms,
            truncs=truncs,
            state=state,
        )

    def _remove_dead(self) -> None:
        env = self.env
        for _ in range(len(env.possible_agents) + 1):
            agent = env.agent_selection
            if not env.agents or not (env.terminations[agent] or env.truncations[agent]):
                return
            env.step(None)
        raise RuntimeError(
            f"PettingZooWrapper.step: the AEC env keeps selecting done agents (got "
            f"{env.agent_selection!r} still selected after removing every done agent; expected "
            "a live agent to act). The env breaks the AEC protocol; wrap its parallel version."
        )
