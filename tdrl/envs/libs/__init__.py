"""Wrappers for external simulators: gymnasium (imported lazily, only when an env is built).

- :class:`GymEnv`: builds a gymnasium env (or vector env) from its id and wraps it.
- :class:`GymWrapper`: wraps an existing ``gymnasium.Env`` or ``gymnasium.vector.VectorEnv``.
- :func:`space_to_spec`: the tdrl spec of a gymnasium space.
- :class:`VmasEnv`, :class:`VmasWrapper`: VMAS's vectorised multi-agent scenarios (vmas imported
  lazily).
"""

from tdrl.envs.libs._gym_spaces import space_to_spec
from tdrl.envs.libs._gymnasium import GymEnv, GymWrapper
from tdrl.envs.libs._vmas import VmasEnv, VmasWrapper

__all__ = ["GymEnv", "GymWrapper", "VmasEnv", "VmasWrapper", "space_to_spec"]
