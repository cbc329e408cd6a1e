"""``load_dataset("<source>:<id>")`` and ``register_dataset`` (TorchRL's dataset registry)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["load_dataset", "register_dataset"]

_REGISTRY: dict[str, Callable[..., Any] | str] = {
    "d4rl": "tdrl.data.datasets._d4rl:D4RLExperienceReplay",
    "minari": "tdrl.data.datasets._minari:MinariExperienceReplay",
}


def _prefix(where: str, prefix: Any) -> str:
    if not isinstance(prefix, str) or not prefix.strip() or ":" in prefix:
        raise ValueError(
            f"{where}: invalid source prefix (got {prefix!r}; expected a non-empty string without "
            "':'). Pass a name such as 'minari'."
        )
    return prefix.strip().lower()


def register_dataset(
    prefix: str, dataset: Callable[..., Any] | str, *, replace: bool = False
) -> None:
    """Makes ``load_dataset("<prefix>:<id>", **kwargs)`` call ``dataset(id, **kwargs)``.

    Args:
        prefix: the source name before ``":"``.
        dataset: a callable, or ``"module:attribute"`` imported on first use.
        replace: overwrite an existing registration (else ``KeyError``).

    Examples:
        >>> register_dataset("toy", lambda dataset_id, **kw: dataset_id.upper(), replace=True)
        >>> load_dataset("toy:example")
        'EXAMPLE'
    """
    where = "register_dataset"
    prefix = _prefix(where, prefix)
    if isinstance(dataset, str):
        module, _, attr = dataset.partition(":")
        if not module or not attr:
            raise ValueError(
                f"{where}: invalid import string (got {dataset!r}; expected 'module:attribute'). "
                "Pass the factory itself or its import path."
            )
    elif not callable(dataset):
        raise TypeError(
            f"{where}: the dataset factory is not callable (got {type(dataset).__name__}; "
            "expected a callable or a 'module:attribute' string). Pass the dataset class."
        )
    if prefix in _REGISTRY and not replace:
        raise KeyError(
            f"{where}: source {prefix!r} is already registered (got replace=False; expected a new "
            "prefix). Pass replace=True to overwrite it."
        )
    _REGISTRY[prefix] = dataset


def load_dataset(dataset_id: str, **kwargs: Any) -> Any:
    """Builds the dataset named ``"<source>:<id>"`` (sources: ``minari``, ``d4rl`` and registered).

    Args:
        dataset_id: e.g. ``"minari:mujoco/hopper/expert-v0"`` or ``"d4rl:/data/hopper.hdf5"``.
        **kwargs: passed to the dataset class (``batch_size`` is required by the built-in ones).

    Examples:
        >>> try:
        ...     load_dataset("nowhere:x")
        ... except ValueError as err:
        ...     print(str(err)[:50])
        load_dataset: unknown dataset source 'nowhere' (go
    """
    where = "load_dataset"
    if not isinstance(dataset_id, str) or ":" not in dataset_id:
        raise ValueError(
            f"{where}: the id has no source prefix (got {dataset_id!r}; expected "
            f"'<source>:<id>' with a source in {sorted(_REGISTRY)}). Prefix it, e.g. 'minari:...'."
        )
    prefix, name = dataset_id.split(":", 1)
    factory = _REGISTRY.get(_prefix(where, prefix))
    if factory is None:
        raise ValueError(
            f"{where}: unknown dataset source {prefix!r} (got {dataset_id!r}; expected one of "
            f"{sorted(_REGISTRY)}). Register it with register_dataset."
        )
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory(name, **kwargs)
