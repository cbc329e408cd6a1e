"""RayOptions: the timeouts of every wait on a Ray actor."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["RayOptions"]


@dataclass(frozen=True)
class RayOptions:
    """Timeouts, in seconds, of :class:`RayCollector` and :class:`RayReplayBuffer` (a tdrl
    addition; TorchRL has none). Every ``ray.get``/``ray.wait`` of tdrl uses one of them.

    Attributes:
        start_timeout: an actor's start: scheduling, its process, imports and building the env,
            the policy and the collector (or the buffer). A cluster short of the requested
            resources fails here.
        batch_timeout: one batch (its collection and, with a remote buffer, its write), and a
            buffer's ``dumps``/``loads``. An actor past it is killed and ``TimeoutError`` raised.
        call_timeout: any other call (weights, seeds, states, buffer ``extend``/``sample``/...).
        shutdown_timeout: how long ``shutdown`` lets the actors close their envs before it
            kills them.
        connect_timeout: connecting this process to Ray when it is not connected yet
            (``ray_init_config``): past it a ``TimeoutError`` says what was tried.

    Examples:
        >>> RayOptions(batch_timeout=30.0).batch_timeout
        30.0
        >>> RayOptions(call_timeout=0)
        Traceback (most recent call last):
        ...
        ValueError: RayOptions: call_timeout must be a finite number of seconds > 0 (got 0). Pass e.g. 60.0.
    """

    start_timeout: float = 120.0
    batch_timeout: float = 300.0
    call_timeout: float = 60.0
    shutdown_timeout: float = 10.0
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or not value > 0 or math.isinf(value):
                raise ValueError(
                    f"RayOptions: {field.name} must be a finite number of seconds > 0 (got "
                    f"{value!r}). Pass e.g. 60.0."
                )
