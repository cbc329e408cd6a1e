"""``get_logger`` and ``generate_exp_name``: how TorchRL's scripts create their logger."""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tdrl.record.loggers.common import Logger
from tdrl.record.loggers.csv import CSVLogger
from tdrl.record.loggers.mlflow import MLFlowLogger
from tdrl.record.loggers.tensorboard import TensorboardLogger
from tdrl.record.loggers.wandb import WandbLogger

__all__ = ["generate_exp_name", "get_logger"]

_TYPES = ("tensorboard", "csv", "wandb", "mlflow")
_BACKEND_KWARGS = ("wandb_kwargs", "mlflow_kwargs", "trackio_kwargs")
_UNSUPPORTED: dict[str, Any] = {
    "state_dict": None,
    "service_backend": "direct",
    "service_backend_options": None,
    "use_ray_service": False,
    "ray_actor_options": None,
}


def _check_options(options: dict[str, Any]) -> None:
    """Rejects unknown keywords and the unsupported TorchRL options away from their defaults."""
    unknown = sorted(set(options) - set(_BACKEND_KWARGS) - set(_UNSUPPORTED))
    if unknown:
        raise TypeError(
            f"get_logger: unexpected arguments (got {unknown}; expected "
            f"{list(_BACKEND_KWARGS)}). Drop them."
        )
    for name, default in _UNSUPPORTED.items():
        if options.get(name, default) != default:
            raise NotImplementedError(
                f"get_logger: {name} is not supported by tdrl (got {options[name]!r}; "
                f"expected {default!r}). Drop it: tdrl's loggers run in this process."
            )


def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """A unique run name: ``<model>_<experiment>_<8 hex chars>_<yy_mm_dd-HH_MM_SS>``.

    Examples:
        >>> name = generate_exp_name("PPO", "cartpole")
        >>> name.startswith("PPO_cartpole_"), len(name.split("_")[2])
        (True, 8)
    """
    return "_".join(
        (
            model_name,
            experiment_name,
            str(uuid.uuid4())[:8],
            datetime.now().strftime("%y_%m_%d-%H_%M_%S"),
        )
    )


def get_logger(
    logger_type: str | None,
    logger_name: str,
    experiment_name: str,
    *,
    state_dict: Mapping[str, Any] | None = None,
    service_backend: str = "direct",
    service_backend_options: dict[str, Any] | None = None,
    use_ray_service: bool = False,
    ray_actor_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Logger | None:
    """The logger of ``logger_type`` (``""`` or None gives None, for "no logging").

    - ``"csv"``: ``CSVLogger(experiment_name, log_dir=logger_name, video_format="mp4")``.
    - ``"tensorboard"``: ``TensorboardLogger(experiment_name, log_dir=logger_name)``.
    - ``"wandb"``: ``WandbLogger(experiment_name, log_dir=logger_name, **wandb_kwargs)``.
    - ``"mlflow"``: ``MLFlowLogger(experiment_name, tracking_uri=<file URI of logger_name>,
      **mlflow_kwargs)``.

    Args:
        logger_type: ``"csv"``, ``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``""`` or None.
        logger_name: the folder the logs go to.
        experiment_name: the experiment's (run's) name.
        state_dict: TorchRL's logger-state resume; only None (the default) is supported.
        service_backend: only ``"direct"`` (the logger lives in this process).
        service_backend_options: only None.
        use_ray_service: only False.
        ray_actor_options: only None.
        **kwargs: ``wandb_kwargs`` and ``mlflow_kwargs`` (dicts) for those loggers; a script
            may pass them whatever the type (they configure that type only).

    Raises:
        NotImplementedError: an unknown ``logger_type`` (TorchRL's error type), or a TorchRL
            option tdrl does not support set to another value than its default.
        TypeError: an unknown keyword.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     logger = get_logger("csv", logger_name=d, experiment_name="ppo_run")
        ...     type(logger).__name__, logger.experiment.log_dir == os.path.join(d, "ppo_run")
        ('CSVLogger', True)
        >>> get_logger("", "logs", "exp") is None
        True
    """
    _check_options(
        {
            **kwargs,
            "state_dict": state_dict,
            "service_backend": service_backend,
            "service_backend_options": service_backend_options,
            "use_ray_service": use_ray_service,
            "ray_actor_options": ray_actor_options,
        }
    )
    if logger_type == "tensorboard":
        return TensorboardLogger(log_dir=logger_name, exp_name=experiment_name)
    if logger_type == "csv":
        return CSVLogger(log_dir=logger_name, exp_name=experiment_name, video_format="mp4")
    if logger_type == "wandb":
        return WandbLogger(
            log_dir=logger_name, exp_name=experiment_name, **dict(kwargs.get("wandb_kwargs", {}))
        )
    if logger_type == "mlflow":
        uri = pathlib.Path(os.path.abspath(logger_name)).as_uri()
        return MLFlowLogger(
            tracking_uri=uri, exp_name=experiment_name, **dict(kwargs.get("mlflow_kwargs", {}))
        )
    if logger_type in ("", None):
        return None
    raise NotImplementedError(
        f"get_logger: unsupported logger_type (got {logger_type!r}; expected one of "
        f"{_TYPES}, '' or None). Pick one of them."
    )
