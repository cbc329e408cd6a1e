"""TorchRL's ``torchrl.envs.libs.gym`` import path: ``from tdrl.envs.libs.gym import GymEnv``.

tdrl wraps gymnasium (not the legacy ``gym`` package); the names are those of
:mod:`tdrl.envs.libs`, ``set_gym_backend`` and ``gym_backend`` included.

Examples:
    >>> from tdrl.envs.libs.gym import GymEnv
    >>> import tdrl.envs
    >>> GymEnv is tdrl.envs.GymEnv
    True
"""

from tdrl.envs.libs._gym_backend import gym_backend, set_gym_backend
from tdrl.envs.libs._gym_env import GymEnv
from tdrl.envs.libs._gymnasium import GymWrapper

__all__ = ["GymEnv", "GymWrapper", "gym_backend", "set_gym_backend"]
