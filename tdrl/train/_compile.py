"""``tdrl train --compile``: the run config's ``[compile]`` table as ``torch.compile`` arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from tdrl.objectives._compile import compile_kwargs

__all__ = ["compile_settings", "compile_step", "policy_compile"]

_KEYS = ("enabled", "backend", "mode", "policy")
_WHERE = "tdrl train --compile"
F = TypeVar("F", bound=Callable[..., Any])


def compile_settings(config: dict[str, Any]) -> dict[str, Any] | None:
    """The ``torch.compile`` arguments of ``config["compile"]`` (None when not enabled).

    The table holds ``enabled`` (``--compile`` sets it), ``backend`` (``"inductor"``, or e.g.
    ``"eager"`` to check tracing only), ``mode`` (an inductor mode, ``"default"`` for none)
    and ``policy`` (also compile the collector's policy). Runs saved without the table do
    not compile.

    Raises:
        ValueError: an unknown key, backend or mode (checked before training starts).

    Examples:
        >>> compile_settings({"compile": {"enabled": True, "backend": "eager"}})
        {'backend': 'eager'}
        >>> compile_settings({}) is None
        True
    """
    table = config.get("compile") or {}
    if not isinstance(table, dict) or set(table) - set(_KEYS):
        raise ValueError(
            f"{_WHERE}: bad [compile] table (got {table!r}; expected keys among {list(_KEYS)}). "
            "Check the spelling, e.g. --set compile.backend=eager."
        )
    if not table.get("enabled", False):
        return None
    settings: dict[str, Any] = {"backend": table.get("backend", "inductor")}
    if table.get("mode", "default") not in ("", "default"):
        settings["mode"] = table["mode"]
    compile_kwargs(_WHERE, settings)  # refuses a bad backend or mode now, not mid-run
    return settings


def compile_step(fn: F, config: dict[str, Any]) -> F:
    """``fn`` (an update step: loss, backward, optimiser step), compiled when the run asks."""
    settings = compile_settings(config)
    if settings is None:
        return fn
    return torch.compile(fn, **compile_kwargs(_WHERE, settings))  # type: ignore[return-value]


def policy_compile(config: dict[str, Any]) -> dict[str, Any] | None:
    """The collector's ``compile_policy`` (None unless ``compile.enabled`` and ``.policy``)."""
    settings = compile_settings(config)
    if settings is None or not config["compile"].get("policy", False):
        return None
    return settings
