"""``set_recurrent_mode``: switch every recurrent module of a policy for a block of code."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from tdrl.modules.rnn._base import RecurrentModuleBase

__all__ = ["set_recurrent_mode"]


@contextlib.contextmanager
def set_recurrent_mode(module: nn.Module, mode: bool = True) -> Iterator[nn.Module]:
    """Sets the recurrent mode of every :class:`LSTMModule`/:class:`GRUModule` inside ``module``.

    The previous modes come back when the block ends. It only touches the modules it is given
    (no global state): pass the policy or the loss that holds the recurrent modules.

    Args:
        module: any module; it and its submodules are searched.
        mode: ``True`` for sequence mode, ``False`` for step mode.

    Examples:
        >>> from tensordict.nn import TensorDictSequential
        >>> from tdrl.modules import LSTMModule
        >>> lstm = LSTMModule(3, 4, in_key="x", out_key="y")
        >>> policy = TensorDictSequential(lstm)
        >>> with set_recurrent_mode(policy):
        ...     lstm.recurrent_mode
        True
        >>> lstm.recurrent_mode
        False
    """
    found = [m for m in module.modules() if isinstance(m, RecurrentModuleBase)]
    previous = [m.recurrent_mode for m in found]
    for m in found:
        m.set_recurrent_mode(mode)
    try:
        yield module
    finally:
        for m, prev in zip(found, previous):
            m.set_recurrent_mode(prev)
