"""Ray actor options given by the user (TorchRL's ``remote_configs``/``remote_config``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["actor_options"]

#: actor options tdrl sets itself, and why the user may not
_RESERVED = {
    "max_restarts": "tdrl restarts collector actors itself (RayCollector(max_restarts=...)); a "
    "buffer actor is never restarted, since it would come back empty",
    "max_task_retries": "a lost batch is collected again by tdrl, which keeps it from being "
    "delivered twice",
    "name": "tdrl names its actors",
    "namespace": "tdrl's actors live in the job's namespace",
    "lifetime": "tdrl's actors end with their owner (shutdown() or close())",
    "get_if_exists": "every tdrl object starts its own actors",
}


def actor_options(
    owner: str, arg: str, config: Mapping[str, Any] | None, defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """``defaults`` updated with the user's actor options ``config`` (checked).

    Raises:
        TypeError: ``config`` is not a dict.
        ValueError: it sets an option tdrl manages itself.

    Examples:
        >>> actor_options("f", "remote_config", {"num_gpus": 1}, {"num_cpus": 1})
        {'num_cpus': 1, 'num_gpus': 1}
    """
    if config is None:
        return dict(defaults)
    if not isinstance(config, Mapping):
        raise TypeError(
            f"{owner}: {arg} must be a dict of Ray actor options (got "
            f"{type(config).__name__}). Pass e.g. {{'num_cpus': 1, 'num_gpus': 0}}."
        )
    for key in config:
        if key in _RESERVED:
            raise ValueError(
                f"{owner}: {arg} may not set {key!r} (got {key}={config[key]!r}; expected "
                f"resources and scheduling options only): {_RESERVED[key]}. Drop {key!r}."
            )
    return {**defaults, **config}
