"""``set_recurrent_mode``: sequence or step mode for a block of code, globally or per module."""

from __future__ import annotations

import contextlib
from contextvars import Token
from typing import Any

from torch import nn

from tdrl.modules.rnn._base import RecurrentModuleBase
from tdrl.modules.rnn._global import _MODE

__all__ = ["set_recurrent_mode"]

_NAMES = {"recurrent": True, "sequential": False}


def _as_mode(mode: Any) -> bool | None:
    if mode is None or isinstance(mode, bool):
        return mode
    if isinstance(mode, str) and mode.lower() in _NAMES:
        return _NAMES[mode.lower()]
    raise ValueError(
        f"set_recurrent_mode.__init__: unknown mode (got {mode!r}; expected True, False, None, "
        "'recurrent' or 'sequential', or a module as first argument). Pass e.g. True."
    )


class set_recurrent_mode(contextlib.ContextDecorator):
    """Runs recurrent modules in sequence mode (``True``) or step mode (``False``) in a block.

    Two forms:

    - **Global** (TorchRL's form), ``set_recurrent_mode(True)``: every
      :class:`~tdrl.modules.LSTMModule`/:class:`~tdrl.modules.GRUModule` uses this mode inside
      the block, whatever mode it was given; ``None`` restores the modules' own modes. It is
      tdrl's second documented global mode (with the exploration type): losses enter it with
      ``True`` for their ``forward`` and ``*_loss`` methods, as TorchRL's do. ``"recurrent"``
      and ``"sequential"`` are accepted for ``True`` and ``False``. Also usable as a decorator.
    - **Module** form, ``set_recurrent_mode(module, True)``: sets the own mode of every
      recurrent module inside ``module`` (no global state); ``with ... as m`` gives ``module``
      back. Nested in a global block, the global mode wins.

    The previous modes come back when the block ends.

    Args:
        mode: the global mode, or the module whose recurrent modules are switched.
        mode_for_module: the mode of the module form (``True`` by default).

    Examples:
        >>> from tensordict.nn import TensorDictSequential
        >>> from tdrl.modules import LSTMModule
        >>> lstm = LSTMModule(3, 4, in_key="x", out_key="y")
        >>> with set_recurrent_mode(True):
        ...     lstm.recurrent_mode
        True
        >>> with set_recurrent_mode(TensorDictSequential(lstm)):
        ...     lstm.recurrent_mode
        True
        >>> lstm.recurrent_mode
        False
    """

    def __init__(
        self, mode: bool | str | nn.Module | None = True, mode_for_module: bool = True
    ) -> None:
        self.module = mode if isinstance(mode, nn.Module) else None
        self.mode = bool(mode_for_module) if self.module is not None else _as_mode(mode)
        self._tokens: list[Token[bool | None]] = []
        self._saved: list[list[tuple[RecurrentModuleBase, bool]]] = []

    def __enter__(self) -> Any:
        if self.module is None:
            self._tokens.append(_MODE.set(self.mode))
            return None
        found = [m for m in self.module.modules() if isinstance(m, RecurrentModuleBase)]
        self._saved.append([(m, m._recurrent_mode) for m in found])
        for m in found:
            m.set_recurrent_mode(bool(self.mode))
        return self.module

    def __exit__(self, *exc: Any) -> None:
        if self.module is None:
            _MODE.reset(self._tokens.pop())
            return
        for m, previous in self._saved.pop():
            m.set_recurrent_mode(previous)
