"""TorchRL's ``torchrl.envs.libs.vmas`` import path: ``from tdrl.envs.libs.vmas import VmasEnv``.

The classes are those of :mod:`tdrl.envs.libs` (vmas itself is imported only when an env is
built).

Examples:
    >>> from tdrl.envs.libs.vmas import VmasEnv
    >>> import tdrl.envs
    >>> VmasEnv is tdrl.envs.VmasEnv
    True
"""

from tdrl.envs.libs._vmas import VmasEnv, VmasWrapper

__all__ = ["VmasEnv", "VmasWrapper"]
