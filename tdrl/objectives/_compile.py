"""Checked ``torch.compile`` arguments, shared by ``LossModule.compile`` and ``tdrl train``."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

__all__: list[str] = []


def _compile_parameters() -> list[str]:
    """The keyword arguments of this torch's ``torch.compile`` (the model aside)."""
    return [name for name in inspect.signature(torch.compile).parameters if name != "model"]


def _modes() -> list[str]:
    import torch._inductor

    return sorted(torch._inductor.list_mode_options())


def _check_backend(owner: str, backend: Any) -> None:
    if backend is None or callable(backend):
        return
    known = torch._dynamo.list_backends(exclude_tags=())
    if not isinstance(backend, str) or backend not in known:
        raise ValueError(
            f"{owner}: unknown torch.compile backend (got {backend!r}; expected a callable or one "
            f"of {known}). Pass e.g. backend='inductor' (fast code) or 'eager' (tracing only)."
        )


def _inductor_options(owner: str, mode: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """``mode`` as its inductor options, then ``options``; random draws fall back to eager's."""
    import torch._inductor

    unknown = sorted(set(options) - set(torch._inductor.list_options()))
    if unknown:
        raise ValueError(
            f"{owner}: unknown inductor option(s) {unknown} (got options={dict(options)!r}; "
            "expected names of torch._inductor.list_options()). Check the spelling."
        )
    merged: dict[str, Any] = {"fallback_random": True}
    merged.update(torch._inductor.list_mode_options(mode) if mode is not None else {})
    merged.update(options)
    return merged


def compile_kwargs(owner: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Checks keyword arguments for ``torch.compile`` and returns the ones to pass it.

    Unknown names, backends, modes and inductor options are refused here, naming what is
    wrong, rather than at the first call. With the inductor backend (the default), random
    draws (``torch.randn``, ``rsample``, ...) use the eager generator
    (``options["fallback_random"] = True`` unless given): a compiled loss or policy draws the
    same numbers as the eager one, so seeded runs give the same results compiled or not.
    ``mode`` is then passed as its inductor options (``torch.compile`` takes one of the two).
    Each compiled function keeps its own recompilations (``isolate_recompiles=True`` unless
    given, where this torch has it): compiled losses share their call's code.

    Raises:
        TypeError: an argument ``torch.compile`` does not have, or ``options`` not a dict.
        ValueError: an unknown backend, mode or inductor option, or both ``mode`` and
            ``options``.

    Examples:
        >>> compile_kwargs("f", {"backend": "eager"})["backend"]
        'eager'
        >>> compile_kwargs("f", {"mode": "max-autotune-no-cudagraphs"})["options"]["max_autotune"]
        True
    """
    allowed = _compile_parameters()
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(
            f"{owner}: unknown torch.compile argument(s) {unknown} (got {sorted(kwargs)}; "
            f"expected some of {allowed}). Check the spelling."
        )
    out = dict(kwargs)
    backend = out.get("backend", "inductor")
    _check_backend(owner, backend)
    mode, options = out.pop("mode", None), out.pop("options", None)
    if mode is not None and mode not in _modes():
        raise ValueError(
            f"{owner}: unknown torch.compile mode (got {mode!r}; expected one of {_modes()}). "
            "Leave mode=None for the default."
        )
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(
            f"{owner}: options must be a dict of inductor options (got "
            f"{type(options).__name__}). Pass e.g. options={{'max_autotune': True}}."
        )
    if mode is not None and options is not None:
        raise ValueError(
            f"{owner}: mode and options exclude each other, as in torch.compile (got "
            f"mode={mode!r} and options={dict(options)!r}). Put the mode's settings in options."
        )
    if "isolate_recompiles" in allowed:
        # Losses share their call's code (and trainers theirs): keep each compiled function's
        # recompilations (batch sizes, flags) from filling the others' cache.
        out.setdefault("isolate_recompiles", True)
    if backend in (None, "inductor"):
        out["options"] = _inductor_options(owner, mode, options or {})
    elif mode not in (None, "default") or options:
        raise ValueError(
            f"{owner}: mode and options configure the inductor backend (got backend="
            f"{backend!r} with mode={mode!r}, options={options!r}). Drop them or use "
            "backend='inductor'."
        )
    return out
