"""Torch-native batched environments: every member of the batch steps with the same tensor ops.

- :class:`CartPoleEnv`: ``CartPole-v1`` dynamics, discrete (one-hot by default) actions.
- :class:`PendulumV1Env`: ``Pendulum-v1`` dynamics, a bounded continuous torque.
- :class:`PendulumEnv`: TorchRL's stateless tutorial pendulum (state and physics in the data).
- :class:`MultiAgentNavigationEnv`: agents under ``"agents"`` with per-agent done groups.
- :class:`MaskedActionEnv`: a discrete task publishing its legal actions in ``"action_mask"``.

Discrete actions are one-hot (bool, ``[*B, n]``) by default and indices (``[*B]``) with
``categorical_action_encoding=True``, as in ``tdrl.envs.libs.GymEnv``. The physical state lives
in the env; partial resets only touch the members whose ``_reset`` is true.
"""

from tdrl.envs.builtin._cartpole import CartPoleEnv
from tdrl.envs.builtin._masked import MaskedActionEnv
from tdrl.envs.builtin._navigation import MultiAgentNavigationEnv
from tdrl.envs.builtin._pendulum import PendulumV1Env
from tdrl.envs.builtin._pendulum_stateless import PendulumEnv

__all__ = [
    "CartPoleEnv",
    "MaskedActionEnv",
    "MultiAgentNavigationEnv",
    "PendulumEnv",
    "PendulumV1Env",
]
