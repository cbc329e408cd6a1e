"""Wrappers for external simulators: gymnasium (imported lazily, only when an env is built).

- :class:`GymEnv`: builds a gymnasium env (or vector env) from its id and wraps it.
- :class:`GymWrapper`: wraps an existing ``gymnasium.Env`` or ``gymnasium.vector.VectorEnv``.
- :func:`space_to_spec`: the tdrl spec of a gymnasium space.
- :class:`set_gym_backend`, :func:`gym_backend`: TorchRL's backend switch (gymnasium only).
- :class:`PettingZooEnv`, :class:`PettingZooWrapper`: PettingZoo multi-agent envs, parallel and
  AEC (pettingzoo imported lazily).
- :class:`VmasEnv`, :class:`VmasWrapper`: VMAS's vectorised multi-agent scenarios (vmas imported
  lazily).
"""

from tdrl.envs.libs._gym_backend import gym_backend, set_gym_backend
from tdrl.envs.libs._gym_env import GymEnv
from tdrl.envs.libs._gym_spaces import space_to_spec
from tdrl.envs.libs._gymnasium import GymWrapper
from tdrl.envs.libs._pettingzoo import PettingZooEnv, PettingZooWrapper
from tdrl.envs.libs._vmas import VmasEnv, VmasWrapper

__all__ = [
    "GymEnv",
    "GymWrapper",
    "PettingZooEnv",
    "PettingZooWrapper",
    "VmasEnv",
    "VmasWrapper",
    "gym_backend",
    "set_gym_backend",
    "space_to_spec",
]
