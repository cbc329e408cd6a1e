"""TorchRL's ``torchrl.envs.libs.gym`` import path: ``from tdrl.envs.libs.gym import GymEnv``.

tdrl wraps gymnasium (not the legacy ``gym`` package); the classes are those of
:mod:`tdrl.envs.libs`.

Examples:
    >>> from tdrl.envs.libs.gym import GymEnv
    >>> import tdrl.envs
    >>> GymEnv is tdrl.envs.GymEnv
    True
"""

from tdrl.envs.libs._gymnasium import GymEnv, GymWrapper

__all__ = ["GymEnv", "GymWrapper"]
