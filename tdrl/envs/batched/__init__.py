"""Batched envs: several copies of an env behind one ``EnvBase`` with a leading worker dim.

:class:`SerialEnv` steps its sub-envs one after the other in this process; :class:`ParallelEnv`
runs each in a worker process and exchanges data through shared memory.
"""

from tdrl.envs.batched._parallel import ParallelEnv
from tdrl.envs.batched._serial import SerialEnv

__all__ = ["ParallelEnv", "SerialEnv"]
