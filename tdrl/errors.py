"""Exception types shared across tdrl.

Every error message follows the template
``"<Class>.<method>: <what is wrong> (got <value>; expected <rule>). <How to fix>."``
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "SpecError",
    "WorkerError",
]


class SpecError(ValueError):
    """Data does not match its spec (wrong key, shape, dtype or bounds)."""


class CheckpointError(ValueError):
    """A checkpoint directory is missing, partial, corrupted or does not match its target."""


class WorkerError(RuntimeError):
    """A worker process failed; the message names the worker and carries its remote traceback."""
