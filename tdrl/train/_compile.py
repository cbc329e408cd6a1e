"""``tdrl train --compile``: the run config's ``[compile]`` table as ``torch.compile`` arguments."""

from __future__ import annotations

from typing import Any

from tdrl.objectives import LossModule
from tdrl.objectives._compile import compile_kwargs

__all__ = ["compile_loss", "compile_settings", "policy_compile"]

_KEYS = ("enabled", "backend", "mode", "policy")
_WHERE = "tdrl train --compile"


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


def compile_loss(loss: LossModule, config: dict[str, Any]) -> None:
    """``loss.compile(...)`` when the run asks (its forward and backward graphs are compiled).

    The optimiser step stays eager: the trainers' fused Adam is faster than a compiled one
    (measured, see README's "torch.compile"), and learning-rate schedules cause no recompiles.
    """
    settings = compile_settings(config)
    if settings is not None:
        loss.compile(**settings)


def policy_compile(config: dict[str, Any]) -> dict[str, Any] | None:
    """The collector's ``compile_policy`` (None unless ``compile.enabled`` and ``.policy``)."""
    settings = compile_settings(config)
    if settings is None or not config["compile"].get("policy", False):
        return None
    return settings
