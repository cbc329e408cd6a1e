"""PendulumV1Env: swing a pendulum up and keep it upright, batched and torch-native."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from tdrl.envs.builtin._common import StatefulEnvBase
from tdrl.specs import Bounded, Unbounded

__all__ = ["PendulumV1Env"]

_MAX_SPEED = 8.0
_MAX_TORQUE = 2.0
_DT = 0.05
_MASS = 1.0
_LENGTH = 1.0


class PendulumV1Env(StatefulEnvBase):
    """The inverted-pendulum swing-up task with the dynamics and reward of ``Pendulum-v1``.

    The angle ``theta`` (0 = upright) and angular velocity evolve with a semi-implicit Euler
    step: the velocity is updated from gravity and the clipped torque, clipped to ``[-8, 8]``,
    then the angle moves with the new velocity. The reward is
    ``-(normalized_theta**2 + 0.1 * theta_dot**2 + 0.001 * torque**2)``, computed from the state
    before the step. The task never terminates; it is truncated after ``max_episode_steps``.
    Resets draw ``theta`` in ``[-pi, pi]`` and ``theta_dot`` in ``[-1, 1]``.

    Entries:

    - ``"observation"``: ``[*B, 3]`` float32 ``(cos theta, sin theta, theta_dot)``.
    - ``"action"``: ``Bounded(-2, 2)`` of shape ``[*B, 1]`` (the torque).
    - ``"reward"``: ``[*B, 1]``. ``"done"``/``"terminated"``/``"truncated"``: ``[*B, 1]``.

    The state and step counter live in the env; :meth:`set_state` places the members in a
    chosen state. TorchRL's ``PendulumEnv`` (the stateless tutorial env, state and physics in
    the data) is :class:`tdrl.envs.PendulumEnv`.

    Args:
        batch_size: number of independent pendulums, as leading dims.
        device: where the state and data live.
        g: gravity (10.0 as in ``Pendulum-v1``).
        max_episode_steps: truncation horizon (200 as in ``Pendulum-v1``).

    Examples:
        >>> env = PendulumV1Env(batch_size=(4,))
        >>> _ = env.set_seed(0)
        >>> td = env.rollout(250, break_when_any_done=False)
        >>> td.batch_size, int(td["next", "truncated"].sum())
        (torch.Size([4, 250]), 4)
    """

    def __init__(
        self,
        batch_size: Sequence[int] | torch.Size = (),
        device: torch.device | str | None = None,
        *,
        g: float = 10.0,
        max_episode_steps: int = 200,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        self._init_state(2, max_episode_steps)
        self.g = float(g)
        b, dev = self.batch_size, self.device
        high = torch.tensor([1.0, 1.0, _MAX_SPEED])
        self.observation_spec = Bounded(-high, high, shape=(*b, 3), device=dev)
        self.action_spec = Bounded(-_MAX_TORQUE, _MAX_TORQUE, shape=(*b, 1), device=dev)
        self.reward_spec = Unbounded(shape=(*b, 1), device=dev)
        self.full_done_spec = self.default_done_spec()
        self._reset_scale = torch.tensor([2 * math.pi, 2.0], device=dev)
        self._reset_shift = torch.tensor([math.pi, 1.0], device=dev)

    @property
    def state(self) -> torch.Tensor:
        """A copy of the state, ``[*B, 2]`` ``(theta, theta_dot)``."""
        return self._state.clone()

    def set_state(self, state: torch.Tensor, step_count: torch.Tensor | int = 0) -> TensorDictBase:
        """Places every member in ``state`` and returns the matching root TensorDict.

        Args:
            state: ``[*B, 2]`` ``(theta, theta_dot)`` (broadcast to the batch).
            step_count: steps already taken in the episode (for truncation).

        Examples:
            >>> env = PendulumV1Env()
            >>> env.set_state(torch.tensor([0.0, 1.0]))["observation"].tolist()
            [1.0, 0.0, 1.0]
        """
        return self._place(state, step_count)

    def _observation(self) -> torch.Tensor:
        theta, theta_dot = self._state[..., 0:1], self._state[..., 1:2]
        return torch.cat((theta.cos(), theta.sin(), theta_dot), dim=-1)

    def _fresh_state(self) -> torch.Tensor:
        fresh = torch.rand((*self.batch_size, 2), generator=self._rng, device=self._state.device)
        return fresh.mul_(self._reset_scale).sub_(self._reset_shift)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        torque = tensordict.get("action").clamp(-_MAX_TORQUE, _MAX_TORQUE)
        theta, theta_dot = self._state[..., 0:1], self._state[..., 1:2]
        upright = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi
        cost = upright.square() + 0.1 * theta_dot.square() + 0.001 * torque.square()
        gain = 3.0 / (_MASS * _LENGTH**2)
        accel = (3.0 * self.g / (2.0 * _LENGTH)) * theta.sin() + gain * torque
        new_dot = (theta_dot + accel * _DT).clamp(-_MAX_SPEED, _MAX_SPEED)
        self._state = torch.cat((theta + new_dot * _DT, new_dot), dim=-1)
        self._steps = self._steps + 1
        truncated = self._steps >= self.max_episode_steps
        false = self._false.clone()
        return self._output(
            {"reward": -cost, "done": truncated, "terminated": false, "truncated": truncated}
        )
