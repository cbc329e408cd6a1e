"""Wrappers for external simulators: gymnasium (imported lazily, only when an env is built).

- :class:`GymEnv`: builds a gymnasium env (or vector env) from its id and wraps it.
- :class:`GymWrapper`: wraps an existing ``gymnasium.Env`` or ``gymnasium.vector.VectorEnv``.
- :func:`space_to_spec`: the tdrl spec of a gymnasium space.
"""

from tdrl.envs.libs._gym_spaces import space_to_spec
from tdrl.envs.libs._gymnasium import GymEnv, GymWrapper

__all__ = ["GymEnv", "GymWrapper", "space_to_spec"]
