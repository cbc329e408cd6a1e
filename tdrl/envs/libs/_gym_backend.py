"""TorchRL's gym backend switch: ``set_gym_backend`` and ``gym_backend``.

TorchRL can wrap either gymnasium or the legacy ``gym`` package and picks one with
``set_gym_backend``. tdrl wraps gymnasium only, so the switch accepts gymnasium (as a name, the
module or a callable returning it) and refuses anything else with an error that says so: a
script written for TorchRL runs unchanged when it asks for gymnasium, and fails loudly (instead
of silently running another library) when it asks for ``gym``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["gym_backend", "set_gym_backend"]

_NAME = "gymnasium"

Backend = str | ModuleType | Callable[[], ModuleType]


def _refuse(got: str) -> ValueError:
    return ValueError(
        f"set_gym_backend: tdrl wraps gymnasium only (got {got}; expected 'gymnasium', the "
        "gymnasium module or a callable returning it). gymnasium is gym's maintained successor, "
        "with the same env ids and API: pass set_gym_backend('gymnasium')."
    )


def _import_gymnasium() -> ModuleType:
    try:
        return importlib.import_module(_NAME)
    except ImportError as err:
        raise ImportError(
            "set_gym_backend: gymnasium is not installed (got ImportError; expected "
            "gymnasium>=1.1). Install it with `pip install tdrl[gym]`."
        ) from err


def _check_module(module: Any) -> ModuleType:
    name = getattr(module, "__name__", None)
    if not isinstance(module, ModuleType) or name != _NAME:
        raise _refuse(f"module {name!r}" if isinstance(module, ModuleType) else repr(module))
    return module


class set_gym_backend(contextlib.ContextDecorator):
    """Selects the gym backend (TorchRL's ``torchrl.envs.libs.gym.set_gym_backend``).

    Usable as a context manager, as a decorator, or once for the whole script with ``.set()``.
    gymnasium is tdrl's only backend, so ``"gymnasium"``, the ``gymnasium`` module and a
    callable returning it are accepted and change nothing: inside the block
    :func:`gym_backend` returns gymnasium, as it does outside.

    Args:
        backend: ``"gymnasium"``, the ``gymnasium`` module, or a callable returning it (called
            when the block is entered, as TorchRL does).

    Raises:
        ValueError: another backend (``"gym"``, the legacy ``gym`` module, any other name):
            tdrl cannot wrap it. Names and modules are checked here, callables when used.

    Examples:
        >>> import gymnasium
        >>> with set_gym_backend("gymnasium"):
        ...     gym_backend() is gymnasium
        True
        >>> @set_gym_backend(lambda: gymnasium)
        ... def make():
        ...     return gym_backend("spaces").Box
        >>> make() is gymnasium.spaces.Box
        True
        >>> set_gym_backend("gym")
        Traceback (most recent call last):
        ...
        ValueError: set_gym_backend: tdrl wraps gymnasium only (got 'gym'; expected ...
    """

    def __init__(self, backend: Backend) -> None:
        if isinstance(backend, str):
            if backend != _NAME:
                raise _refuse(repr(backend))
        elif isinstance(backend, ModuleType):
            _check_module(backend)
        elif not callable(backend):
            raise _refuse(repr(backend))
        self._backend = backend

    @property
    def backend(self) -> ModuleType:
        """The backend module (gymnasium), imported or obtained from the callable now."""
        backend = self._backend
        if isinstance(backend, str):
            return _import_gymnasium()
        if isinstance(backend, ModuleType):
            return backend
        return _check_module(backend())

    def set(self) -> None:
        """Sets the backend for the rest of the script (TorchRL); checks it is gymnasium."""
        self.backend  # noqa: B018 (resolving it is the check)

    def clone(self) -> set_gym_backend:
        """A new switch to the same backend (TorchRL's decorator protocol)."""
        return set_gym_backend(self._backend)

    def __enter__(self) -> None:
        self.set()

    def __exit__(self, *exc: Any) -> None:
        return None


def gym_backend(submodule: str | None = None) -> ModuleType:
    """The gym backend (gymnasium), or one of its submodules (TorchRL's ``gym_backend``).

    Args:
        submodule: a submodule name, e.g. ``"spaces"``, ``"wrappers"`` or ``"vector.utils"``
            (a leading ``"."`` is accepted).

    Examples:
        >>> gym_backend().__name__, gym_backend("spaces").__name__
        ('gymnasium', 'gymnasium.spaces')
    """
    gym = _import_gymnasium()
    if submodule is None:
        return gym
    return importlib.import_module(f"{_NAME}.{submodule.lstrip('.')}")
