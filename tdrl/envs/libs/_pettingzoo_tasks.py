"""Building a PettingZoo env from a task name (``"simple_spread_v3"``, ``"classic/tictactoe_v3"``).

A task is an env module's name, ``<name>_v<N>`` as TorchRL takes it (a registry id such as
``"tictactoe-v3"`` is accepted too), optionally prefixed by its family. MPE envs moved out of
pettingzoo into the ``mpe2`` package: ``mpe`` tasks are built from its modules. The other families
come from pettingzoo's registry (``pettingzoo.make``, pettingzoo>=1.27, whose per-module API is
deprecated), or from their modules on older pettingzoo versions.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

__all__ = ["available_tasks", "make_task_env"]

# families in lookup order for a task given without its family; mpe lives in mpe2
FAMILIES = ("mpe", "classic", "butterfly", "sisl", "atari")
_TASK = re.compile(r"^(?P<name>[A-Za-z0-9_]+)[_-]v(?P<version>\d+)$")


def _registry() -> dict[str, Any] | None:
    import pettingzoo

    return getattr(pettingzoo, "aec_registry", None)


def _package(family: str) -> str:
    return "mpe2" if family == "mpe" else f"pettingzoo.{family}"


def _tasks(family: str) -> list[str]:
    """The task names of a family, as ``<name>_v<N>``."""
    registry = None if family == "mpe" else _registry()
    if registry is not None:
        found = [key.split("/", 1)[1] for key in registry if key.startswith(family + "/")]
        return sorted(name.replace("-v", "_v") for name in found)
    try:
        pkg = importlib.import_module(_package(family))
    except ImportError:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if _TASK.match(m.name))


def available_tasks() -> list[str]:
    """Every task name :class:`PettingZooEnv` accepts, family by family (``mpe`` from mpe2).

    Examples:
        >>> "simple_spread_v3" in available_tasks(), "tictactoe_v3" in available_tasks()
        (True, True)
    """
    return [name for family in FAMILIES for name in _tasks(family)]


def make_task_env(task: str, parallel: bool, kwargs: dict[str, Any]) -> Any:
    """Builds the env of ``task``: its parallel version when ``parallel``, else the AEC one.

    Raises:
        ValueError: unknown family or task, or no parallel version.
        ImportError: the task's own dependencies are missing.
    """
    family, _, base = str(task).rpartition("/")
    match = _TASK.match(base)
    if family and family not in FAMILIES:
        raise ValueError(
            f"PettingZooEnv.__init__: unknown task family (got {family!r} in {task!r}; expected "
            f"one of {list(FAMILIES)}). Pass the task name alone, e.g. 'simple_spread_v3'."
        )
    name = f"{match['name']}_v{match['version']}" if match else None
    for fam in FAMILIES:
        if (family and fam != family) or name not in _tasks(fam):
            continue
        try:
            return _build(fam, name, parallel, kwargs)
        except ImportError as err:
            extra = "mpe2" if fam == "mpe" else f"'pettingzoo[{fam}]'"
            raise ImportError(
                f"PettingZooEnv.__init__: task {task!r} needs packages that are missing (got "
                f"{type(err).__name__}: {err}; expected the env to import). Install them, e.g. "
                f"`pip install {extra}`."
            ) from err
    raise ValueError(
        f"PettingZooEnv.__init__: unknown task (got {task!r}; expected one of "
        f"{available_tasks()}). Pass a name such as 'simple_spread_v3' or "
        "'classic/tictactoe_v3', or build the env yourself and wrap it with PettingZooWrapper."
    )


def _build(family: str, name: str, parallel: bool, kwargs: dict[str, Any]) -> Any:
    if family != "mpe" and _registry() is not None:
        import pettingzoo

        env_id = f"{family}/{name.rpartition('_v')[0]}-v{name.rpartition('_v')[2]}"
        if parallel and env_id not in pettingzoo.parallel_registry:
            _no_parallel(f"{family}/{name}")
        return pettingzoo.make("parallel" if parallel else "aec", env_id, **kwargs)
    module = importlib.import_module(f"{_package(family)}.{name}")
    builder = getattr(module, "parallel_env" if parallel else "env", None)
    if builder is None:
        _no_parallel(f"{family}/{name}")
    return builder(**kwargs)  # type: ignore[misc]


def _no_parallel(task: str) -> None:
    raise ValueError(
        f"PettingZooEnv.__init__: task {task!r} has no parallel version (got parallel=True; "
        "expected parallel=False for this turn-based env). Pass parallel=False, use_mask=True."
    )
