"""Environments: the EnvBase contract, built-in envs, wrappers, transforms and batched envs.

This module is a facade: it re-exports the public names of ``tdrl.envs.core``,
``tdrl.envs.builtin``, ``tdrl.envs.libs``, ``tdrl.envs.transforms`` and ``tdrl.envs.batched``.
Code inside ``tdrl/envs/`` imports from those subpackages directly.
"""

from tdrl.envs import batched as _batched
from tdrl.envs import builtin as _builtin
from tdrl.envs import core as _core
from tdrl.envs import libs as _libs
from tdrl.envs import transforms as _transforms
from tdrl.envs.batched import *  # noqa: F403
from tdrl.envs.builtin import *  # noqa: F403
from tdrl.envs.core import *  # noqa: F403
from tdrl.envs.libs import *  # noqa: F403
from tdrl.envs.transforms import *  # noqa: F403

__all__ = [
    *_core.__all__,
    *_builtin.__all__,
    *_libs.__all__,
    *_transforms.__all__,
    *_batched.__all__,
]
