"""The process-wide recurrent mode read by every recurrent module (``None``: each its own)."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["recurrent_mode"]

# A ContextVar rather than a module global: threads and asyncio tasks each see their own value.
_MODE: ContextVar[bool | None] = ContextVar("tdrl_recurrent_mode", default=None)


def recurrent_mode() -> bool | None:
    """The recurrent mode set by the innermost global :func:`set_recurrent_mode` block.

    ``None`` (no block active) lets each module use the mode it was given with its
    ``set_recurrent_mode(mode)`` method (step mode by default).

    Examples:
        >>> from tdrl.modules.rnn import set_recurrent_mode
        >>> recurrent_mode() is None
        True
        >>> with set_recurrent_mode(True):
        ...     recurrent_mode()
        True
    """
    return _MODE.get()
