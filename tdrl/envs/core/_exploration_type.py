"""The exploration type: the one global mode of tdrl, read by every probabilistic module.

It lives with the envs (as TorchRL's lives in ``torchrl.envs``) so envs, modules and collectors
share it; ``tdrl.envs`` and ``tdrl.modules`` both export the same objects.
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any

from tensordict.nn import InteractionType, interaction_type, set_interaction_type

__all__ = ["ExplorationType", "exploration_type", "set_exploration_type"]


class ExplorationType(enum.Enum):
    """How policies pick actions.

    - ``RANDOM``: sample from the distribution and let exploration modules add their noise
      (the default, used for data collection).
    - ``DETERMINISTIC``: the distribution's ``deterministic_sample`` (e.g. ``tanh(loc)`` for a
      TanhNormal, the most likely class for a categorical); exploration modules are off.
    - ``MODE`` / ``MEDIAN`` / ``MEAN``: the distribution's mode / median / mean; exploration
      modules are off.

    Examples:
        >>> ExplorationType("mode") is ExplorationType.MODE
        True
    """

    RANDOM = "random"
    DETERMINISTIC = "deterministic"
    MODE = "mode"
    MEDIAN = "median"
    MEAN = "mean"

    @property
    def interaction_type(self) -> InteractionType:
        """The matching :class:`tensordict.nn.InteractionType`.

        Examples:
            >>> ExplorationType.DETERMINISTIC.interaction_type.value
            'deterministic'
        """
        return InteractionType(self.value)


def exploration_type() -> ExplorationType:
    """The exploration type in effect: ``RANDOM`` unless a :class:`set_exploration_type` is active.

    It reads tensordict's interaction type, so a ``tensordict.nn.set_interaction_type`` block is
    seen too.

    Examples:
        >>> exploration_type()
        <ExplorationType.RANDOM: 'random'>
        >>> with set_exploration_type("mean"):
        ...     exploration_type()
        <ExplorationType.MEAN: 'mean'>
    """
    current = interaction_type()
    if current is None:
        return ExplorationType.RANDOM
    return ExplorationType(current.value)


def _as_exploration_type(value: ExplorationType | InteractionType | str) -> ExplorationType:
    if isinstance(value, ExplorationType):
        return value
    name = value.value if isinstance(value, InteractionType) else value
    if isinstance(name, str):
        try:
            return ExplorationType(name.lower())
        except ValueError:
            pass
    allowed = ", ".join(repr(e.value) for e in ExplorationType)
    raise ValueError(
        f"set_exploration_type.__init__: unknown exploration type (got {value!r}; expected an"
        f" ExplorationType or one of {allowed}). Pass e.g. ExplorationType.DETERMINISTIC."
    )


class set_exploration_type(contextlib.ContextDecorator):
    """Sets the exploration type inside a ``with`` block or a decorated function.

    Probabilistic modules (``tensordict.nn.ProbabilisticTensorDictModule``, hence
    :class:`~tdrl.modules.ProbabilisticActor`) sample according to it, and exploration modules
    (:class:`~tdrl.modules.EGreedyModule`, ...) only add noise under ``RANDOM``. The previous
    type comes back when the block ends. It is built on ``tensordict.nn.set_interaction_type``
    and, like it, applies to the whole process.

    Args:
        type: an :class:`ExplorationType`, a ``tensordict.nn.InteractionType`` or its name
            (``"random"``, ``"deterministic"``, ``"mode"``, ``"median"``, ``"mean"``, any
            case). Defaults to ``DETERMINISTIC``, as TorchRL (``with set_exploration_type():``
            evaluates a policy).

    Raises:
        ValueError: the type is unknown.

    Examples:
        >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
        ...     exploration_type().name
        'DETERMINISTIC'
        >>> @set_exploration_type("mode")
        ... def evaluate():
        ...     return exploration_type().name
        >>> evaluate(), exploration_type().name
        ('MODE', 'RANDOM')
    """

    def __init__(
        self, type: ExplorationType | InteractionType | str = ExplorationType.DETERMINISTIC
    ) -> None:
        self.type = _as_exploration_type(type)
        self._active: list[set_interaction_type] = []

    def __enter__(self) -> set_exploration_type:
        ctx = set_interaction_type(self.type.interaction_type)
        ctx.__enter__()
        self._active.append(ctx)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._active.pop().__exit__(*exc)
