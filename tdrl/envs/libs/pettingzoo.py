"""TorchRL's ``torchrl.envs.libs.pettingzoo`` import path: ``from tdrl.envs.libs.pettingzoo import
PettingZooEnv``.

The classes are those of :mod:`tdrl.envs.libs` (pettingzoo itself is imported only when an env is
built).

Examples:
    >>> from tdrl.envs.libs.pettingzoo import PettingZooEnv
    >>> import tdrl.envs
    >>> PettingZooEnv is tdrl.envs.PettingZooEnv
    True
"""

from tdrl.envs.libs._pettingzoo import PettingZooEnv, PettingZooWrapper

__all__ = ["PettingZooEnv", "PettingZooWrapper"]
