"""tdrl.distributed: collectors and replay buffers on Ray (``pip install tdrl[ray]``).

:class:`RayCollector` runs collector actors anywhere in a Ray cluster, restarts the ones that
die and syncs policy weights through the object store; :class:`RayReplayBuffer` keeps a tdrl
replay buffer in an actor that many collectors write to. This is the only package of tdrl that
imports Ray: importing it without Ray raises an ``ImportError`` naming the extra to install.
"""

from tdrl.distributed._buffer import RayReplayBuffer
from tdrl.distributed._collector import RayCollector
from tdrl.distributed._connect import connect_ray
from tdrl.distributed._options import RayOptions

__all__ = ["RayCollector", "RayOptions", "RayReplayBuffer", "connect_ray"]
