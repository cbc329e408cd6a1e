"""CartPoleEnv: the classic cart-pole balancing task, batched and torch-native."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from tdrl.envs.builtin._common import StatefulEnvBase, discrete_action_spec
from tdrl.specs import Unbounded

__all__ = ["CartPoleEnv"]

# Physical constants of the classic task (Barto, Sutton & Anderson, 1983), as in CartPole-v1.
_GRAVITY = 9.8
_MASS_CART = 1.0
_MASS_POLE = 0.1
_TOTAL_MASS = _MASS_CART + _MASS_POLE
_HALF_LENGTH = 0.5
_POLE_MOMENT = _MASS_POLE * _HALF_LENGTH
_FORCE = 10.0
_TAU = 0.02
_X_LIMIT = 2.4
_THETA_LIMIT = 12 * 2 * math.pi / 360


class CartPoleEnv(StatefulEnvBase):
    """Balance a pole on a cart by pushing the cart left or right (``CartPole-v1`` dynamics).

    Every member of the batch is simulated with the same tensor ops (Euler integration, the
    constants and thresholds of gymnasium's ``CartPole-v1``). An episode terminates when the
    cart leaves ``[-2.4, 2.4]`` or the pole leans more than 12 degrees, and is truncated after
    ``max_episode_steps`` steps; the reward is 1 at every step, the terminal one included.
    Resets draw the state uniformly in ``[-0.05, 0.05]``.

    Entries:

    - ``"observation"``: ``[*B, 4]`` float32 ``(x, x_dot, theta, theta_dot)``.
    - ``"action"``: one-hot ``OneHot(2)`` of shape ``[*B, 2]`` (int64) by default, index 1 pushes
      right; with ``categorical_action_encoding=True`` an index ``Categorical(2)`` of shape
      ``[*B]`` (int64). The same convention as ``GymEnv``.
    - ``"reward"``: ``[*B, 1]`` float32. ``"done"``/``"terminated"``/``"truncated"``: ``[*B, 1]``.

    The physical state and the step counter live in the env (like a simulator), not in the
    data, so observation transforms cannot corrupt them; resets only touch the members whose
    ``_reset`` is true. :meth:`set_state` places the members in a chosen state.

    Args:
        batch_size: number of independent cart-poles, as leading dims.
        device: where the state and data live.
        categorical_action_encoding: use index actions instead of one-hot ones.
        max_episode_steps: truncation horizon (500 as in ``CartPole-v1``).

    Examples:
        >>> env = CartPoleEnv(batch_size=(8,))
        >>> _ = env.set_seed(0)
        >>> td = env.rollout(600, break_when_any_done=False)
        >>> td.batch_size, td["next", "reward"].unique().tolist()
        (torch.Size([8, 600]), [1.0])
        >>> env.action_spec.shape
        torch.Size([8, 2])
    """

    def __init__(
        self,
        batch_size: Sequence[int] | torch.Size = (),
        device: torch.device | str | None = None,
        *,
        categorical_action_encoding: bool = False,
        max_episode_steps: int = 500,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device)
        self._init_state(4, max_episode_steps)
        self.categorical_action_encoding = categorical_action_encoding
        b, dev = self.batch_size, self.device
        self.observation_spec = Unbounded(shape=(*b, 4), device=dev)
        self.action_spec = discrete_action_spec(2, b, dev, categorical_action_encoding)
        self.reward_spec = Unbounded(shape=(*b, 1), device=dev)
        self.full_done_spec = self.default_done_spec()
        # Termination bounds per state entry (the velocities are unbounded).
        self._limits = torch.tensor([_X_LIMIT, math.inf, _THETA_LIMIT, math.inf], device=dev)

    @property
    def state(self) -> torch.Tensor:
        """A copy of the physical state, ``[*B, 4]`` ``(x, x_dot, theta, theta_dot)``."""
        return self._state.clone()

    def set_state(self, state: torch.Tensor, step_count: torch.Tensor | int = 0) -> TensorDictBase:
        """Places every member in ``state`` and returns the matching root TensorDict.

        Args:
            state: ``[*B, 4]`` ``(x, x_dot, theta, theta_dot)`` (broadcast to the batch).
            step_count: steps already taken in the episode (for truncation).

        Examples:
            >>> env = CartPoleEnv()
            >>> td = env.set_state(torch.tensor([0.0, 0.0, 0.1, 0.0]))
            >>> td["observation"].tolist()
            [0.0, 0.0, 0.10000000149011612, 0.0]
        """
        return self._place(state, step_count)

    def _observation(self) -> torch.Tensor:
        # A copy of the state: whatever a consumer does to it in place cannot reach the env.
        return self._state.clone()

    def _fresh_state(self) -> torch.Tensor:
        fresh = torch.rand((*self.batch_size, 4), generator=self._rng, device=self._state.device)
        return fresh.mul_(0.1).sub_(0.05)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        right = (
            action.unsqueeze(-1).bool()
            if self.categorical_action_encoding
            else action[..., 1:2].bool()
        )
        self._state = _integrate(self._state, torch.where(right, _FORCE, -_FORCE))
        terminated = (self._state.abs() > self._limits).any(-1, keepdim=True)
        self._steps = self._steps + 1
        truncated = self._steps >= self.max_episode_steps
        return self._output(
            {
                "reward": torch.ones_like(terminated, dtype=torch.float32),
                "done": terminated | truncated,
                "terminated": terminated,
                "truncated": truncated,
            }
        )


def _integrate(state: torch.Tensor, force: torch.Tensor) -> torch.Tensor:
    """One Euler step of the cart-pole equations; ``state`` is ``[..., 4]``, ``force`` ``[..., 1]``.

    The fused ``addcmul``/in-place ops on fresh temporaries halve the number of kernels of the
    textbook formulation (this is the hot path of every rollout).
    """
    x_dot, theta, theta_dot = state[..., 1:2], state[..., 2:3], state[..., 3:4]
    cos, sin = theta.cos(), theta.sin()
    temp = torch.addcmul(force, theta_dot.square(), sin, value=_POLE_MOMENT).div_(_TOTAL_MASS)
    denom = cos.square().mul_(-_MASS_POLE / _TOTAL_MASS).add_(4.0 / 3.0).mul_(_HALF_LENGTH)
    theta_acc = torch.addcmul(sin.mul_(_GRAVITY), cos, temp, value=-1.0).div_(denom)
    x_acc = torch.addcmul(temp, theta_acc, cos, value=-_POLE_MOMENT / _TOTAL_MASS)
    deriv = torch.cat((x_dot, x_acc, theta_dot, theta_acc), dim=-1)
    return torch.add(state, deriv, alpha=_TAU)
