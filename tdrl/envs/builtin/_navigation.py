"""MultiAgentNavigationEnv: agents drive to their own goals on a plane; per-agent done groups."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.builtin._common import make_generator, move_state, read_mask, seed_generator
from tdrl.envs.core import EnvBase
from tdrl.specs import Bounded, Categorical, Composite, Unbounded

__all__ = ["MultiAgentNavigationEnv"]


class MultiAgentNavigationEnv(EnvBase):
    """``n_agents`` point agents each drive to their own goal in the square ``[-1, 1]^2``.

    An agent's action is a velocity in ``[-1, 1]^2``; it moves by ``dt * action`` (clipped to
    the square). Its reward is ``shaping * (previous distance - new distance)`` plus
    ``goal_bonus`` on the step it comes within ``goal_radius`` of its goal. An agent that
    reached its goal is *finished*: ``("agents", "terminated")`` is true for it, it stops moving
    and earns nothing until it is reset through ``("agents", "_reset")`` (which gives it a new
    start and goal while the other agents carry on). The root episode terminates when all
    agents are finished at once and is truncated after ``max_steps`` steps (the truncation is
    copied to every agent's ``("agents", "truncated")``, so per-agent value targets stop there
    too). A root ``_reset`` resets every agent.

    Entries (``n = n_agents``):

    - ``("agents", "observation")``: ``[*B, n, 4]`` float32 (position, goal - position).
    - ``("agents", "action")``: ``Bounded(-1, 1)`` of shape ``[*B, n, 2]``.
    - ``("agents", "reward")``: ``[*B, n, 1]``.
    - ``("agents", "done"/"terminated"/"truncated")``: ``[*B, n, 1]``.
    - ``"done"``/``"terminated"``/``"truncated"``: ``[*B, 1]``.

    Args:
        batch_size: number of independent worlds, as leading dims.
        device: where the state and data live.
        n_agents: agents per world.
        max_steps: root truncation horizon.
        goal_radius: distance under which an agent has reached its goal.
        dt: time step (the largest move per step is ``dt`` per axis).
        shaping: scale of the distance-decrease reward.
        goal_bonus: reward on reaching the goal.

    Examples:
        >>> env = MultiAgentNavigationEnv(batch_size=(2,), n_agents=3)
        >>> env.reset_keys
        ['_reset', ('agents', '_reset')]
        >>> td = env.rollout(5, break_when_any_done=False)
        >>> td["next", "agents", "reward"].shape
        torch.Size([2, 5, 3, 1])
    """

    def __init__(
        self,
        batch_size: Sequence[int] | torch.Size = (),
        device: torch.device | str | None = None,
        *,
        n_agents: int = 3,
        max_steps: int = 100,
        goal_radius: float = 0.1,
        dt: float = 0.1,
        shaping: float = 10.0,
        goal_bonus: float = 1.0,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        if n_agents < 1 or max_steps < 1:
            raise ValueError(
                f"MultiAgentNavigationEnv.__init__: n_agents and max_steps must be positive "
                f"(got n_agents={n_agents}, max_steps={max_steps}; expected >= 1). Fix them."
            )
        self.n_agents = int(n_agents)
        self.max_steps = int(max_steps)
        self.goal_radius = float(goal_radius)
        self.dt = float(dt)
        self.shaping = float(shaping)
        self.goal_bonus = float(goal_bonus)
        self._set_specs()
        b, n, dev = self.batch_size, self.n_agents, self.device
        self._rng = make_generator(dev)
        self._pos = torch.zeros((*b, n, 2), device=dev)
        self._goal = torch.zeros((*b, n, 2), device=dev)
        self._dist = torch.zeros((*b, n, 1), device=dev)
        self._finished = torch.zeros((*b, n, 1), dtype=torch.bool, device=dev)
        self._steps = torch.zeros((*b, 1), dtype=torch.int64, device=dev)

    def _set_specs(self) -> None:
        b, n, dev = tuple(self.batch_size), self.n_agents, self.device

        def flag(shape: tuple[int, ...]) -> Categorical:
            return Categorical(2, shape=shape, dtype=torch.bool, device=dev)

        agent_shape = (*b, n)
        self.full_observation_spec = Composite(
            agents=Composite(
                observation=Unbounded(shape=(*agent_shape, 4), device=dev), shape=agent_shape
            ),
            shape=b,
        )
        self.full_action_spec = Composite(
            agents=Composite(
                action=Bounded(-1.0, 1.0, shape=(*agent_shape, 2), device=dev), shape=agent_shape
            ),
            shape=b,
        )
        self.full_reward_spec = Composite(
            agents=Composite(
                reward=Unbounded(shape=(*agent_shape, 1), device=dev), shape=agent_shape
            ),
            shape=b,
        )
        done = self.default_done_spec()
        done["agents"] = Composite(
            {k: flag((*agent_shape, 1)) for k in ("done", "terminated", "truncated")},
            shape=agent_shape,
        )
        self.full_done_spec = done

    def _agents(self, data: dict[str, torch.Tensor]) -> TensorDictBase:
        shape = torch.Size((*self.batch_size, self.n_agents))
        return TensorDict._new_unsafe(data, batch_size=shape, device=self.device)

    def _observation(self) -> torch.Tensor:
        return torch.cat((self._pos, self._goal - self._pos), dim=-1)

    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        b, n = self.batch_size, self.n_agents
        root = read_mask(tensordict, "_reset", (*b, 1))
        agents = read_mask(tensordict, ("agents", "_reset"), (*b, n, 1))
        if root is not None:
            root_agents = root.unsqueeze(-2)
            agents = root_agents if agents is None else agents | root_agents
        fresh = torch.rand((2, *b, n, 2), generator=self._rng, device=self._pos.device)
        fresh = fresh.mul_(2.0).sub_(1.0)
        if agents is None:
            self._pos, self._goal = fresh[0], fresh[1]
            self._finished = torch.zeros_like(self._finished)
        else:
            self._pos = torch.where(agents, fresh[0], self._pos)
            self._goal = torch.where(agents, fresh[1], self._goal)
            self._finished = self._finished & ~agents
        if root is None and agents is None:
            self._steps = torch.zeros_like(self._steps)
        elif root is not None:
            self._steps = self._steps.masked_fill(root, 0)
        self._dist = torch.linalg.vector_norm(self._goal - self._pos, dim=-1, keepdim=True)
        agent_data = {
            "observation": self._observation(),
            "done": self._finished.clone(),
            "terminated": self._finished.clone(),
            "truncated": torch.zeros_like(self._finished),
        }
        data: dict[str, torch.Tensor | TensorDictBase] = {"agents": self._agents(agent_data)}
        for key in ("done", "terminated", "truncated"):
            data[key] = torch.zeros((*b, 1), dtype=torch.bool, device=self._pos.device)
        return TensorDict._new_unsafe(data, batch_size=b, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        b = self.batch_size
        action = tensordict.get(("agents", "action")).clamp(-1.0, 1.0)
        active = ~self._finished
        moved = torch.add(self._pos, action, alpha=self.dt).clamp_(-1.0, 1.0)
        self._pos = torch.where(active, moved, self._pos)
        dist = torch.linalg.vector_norm(self._goal - self._pos, dim=-1, keepdim=True)
        reached = active & (dist < self.goal_radius)
        gain = (self._dist - dist).mul_(self.shaping).add_(reached, alpha=self.goal_bonus)
        reward = gain.masked_fill_(~active, 0.0)
        self._dist = dist
        self._finished = self._finished | reached
        self._steps = self._steps + 1
        truncated = self._steps >= self.max_steps
        terminated = self._finished.all(dim=-2)
        agent_trunc = truncated.unsqueeze(-2).expand(*b, self.n_agents, 1).clone()
        finished = self._finished.clone()
        agent_data = {
            "observation": self._observation(),
            "reward": reward,
            "done": finished | agent_trunc,
            "terminated": finished,
            "truncated": agent_trunc,
        }
        data = {
            "agents": self._agents(agent_data),
            "done": terminated | truncated,
            "terminated": terminated,
            "truncated": truncated,
        }
        return TensorDict._new_unsafe(data, batch_size=b, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        seed_generator(self._rng, seed)

    def _to(self, device: torch.device) -> None:
        move_state(self, device)
