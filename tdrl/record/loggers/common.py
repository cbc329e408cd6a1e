"""Logger: the interface every experiment logger implements (TorchRL's ``Logger``).

A logger writes scalars, videos, hyperparameters, histograms and strings to one experiment
(``self.experiment``: a CSV folder, a TensorBoard writer, a W&B run, an MLflow run), named
``exp_name``. :meth:`Logger.log_metrics` logs a dict (or TensorDict) of scalars at once.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["Logger", "metrics_to_python"]


def metrics_to_python(
    metrics: Mapping[str, Any] | TensorDictBase, *, keys_sep: str = "/"
) -> dict[str, Any]:
    """Metrics as plain Python values: one-element tensors become numbers, others lists.

    A TensorDict's nested keys are joined with ``keys_sep``. Device tensors are moved to the
    CPU together (one synchronisation) before they are read.

    Examples:
        >>> import torch
        >>> metrics_to_python({"loss": torch.tensor(0.5), "n": 3, "v": torch.ones(2)})
        {'n': 3, 'loss': 0.5, 'v': [1.0, 1.0]}
    """
    if isinstance(metrics, TensorDictBase):
        metrics = metrics.flatten_keys(keys_sep).to_dict()
    out: dict[str, Any] = {}
    tensors: dict[str, torch.Tensor] = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor):
            tensors[key] = value.detach()
        else:
            out[key] = value
    if tensors:
        moved = [t.to("cpu", non_blocking=True) for t in tensors.values()]
        if any(t.is_cuda for t in tensors.values()):
            torch.cuda.synchronize()
        for key, value in zip(tensors, moved):
            out[key] = value.item() if value.numel() == 1 else value.tolist()
    return out


class Logger(abc.ABC):
    """Base class of the experiment loggers.

    Subclasses create their backend in :meth:`_create_experiment` (called by ``__init__``,
    its result kept as ``self.experiment``) and implement the ``log_*`` methods.

    Args:
        exp_name: the experiment's name.
        log_dir: where the backend writes (its meaning is the backend's).

    Examples:
        >>> class PrintLogger(Logger):
        ...     def _create_experiment(self):
        ...         return []
        ...     def log_scalar(self, name, value, step=None):
        ...         self.experiment.append((name, value, step))
        ...     def log_video(self, name, video, step=None, **kwargs): ...
        ...     def log_hparams(self, cfg): ...
        ...     def log_histogram(self, name, data, **kwargs): ...
        ...     def __repr__(self):
        ...         return "PrintLogger()"
        >>> log = PrintLogger("exp", "logs")
        >>> log.log_metrics({"a": 1.0}, step=3)
        {'a': 1.0}
        >>> log.experiment
        [('a', 1.0, 3)]
    """

    def __init__(self, exp_name: str, log_dir: str | None) -> None:
        self.exp_name = exp_name
        self.log_dir = log_dir
        self._closed = False
        self.experiment = self._create_experiment()

    @abc.abstractmethod
    def _create_experiment(self) -> Any:
        """Creates the backend's experiment object (a writer, a run...)."""

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs one scalar ``value`` under ``name`` at ``step``."""

    @abc.abstractmethod
    def log_video(self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any):
        """Logs a video: a uint8 tensor ``((N), T, C, H, W)`` with 1 or 3 channels."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Any) -> None:
        """Logs the experiment's hyperparameters (a dict, or an OmegaConf config)."""

    @abc.abstractmethod
    def log_histogram(self, name: str, data: Sequence[Any], **kwargs: Any) -> None:
        """Logs a histogram of ``data`` (backends that cannot raise NotImplementedError)."""

    @abc.abstractmethod
    def __repr__(self) -> str: ...

    def log_str(self, name: str, value: str, step: int | None = None) -> None:
        """Logs a string (the backend's text record). Backends without one raise
        NotImplementedError."""
        raise NotImplementedError(
            f"{type(self).__name__}.log_str: this logger cannot log strings (got "
            f"name={name!r}). Use a CSV, TensorBoard, W&B or MLflow logger."
        )

    def log_metrics(
        self,
        metrics: Mapping[str, Any] | TensorDictBase,
        step: int | None = None,
        *,
        keys_sep: str = "/",
    ) -> dict[str, Any]:
        """Logs every scalar of ``metrics`` at ``step``; returns them as Python values.

        Tensors are read once (see :func:`metrics_to_python`); nested TensorDict keys are
        joined with ``keys_sep``.
        """
        values = metrics_to_python(metrics, keys_sep=keys_sep)
        for name, value in values.items():
            self.log_scalar(name, value, step=step)
        return values

    def start(self) -> Logger:
        """Returns ``self``: the logger writes from this process, already started (TorchRL's
        service API, direct backend)."""
        if self._closed:
            raise RuntimeError(
                f"{type(self).__name__}.start: the logger is closed (got a closed logger; "
                "expected an open one). Create a new logger."
            )
        return self

    def client(self) -> Logger:
        """Returns ``self`` (TorchRL's service API, direct backend)."""
        return self

    @property
    def is_alive(self) -> bool:
        """Whether the logger is open."""
        return not self._closed

    @property
    def service_backend(self) -> str:
        """``"direct"``: the logger writes from this process."""
        return "direct"

    def flush(self) -> None:
        """Writes what the backend buffers (a no-op where nothing is buffered)."""
        flush = getattr(self.experiment, "flush", None)
        if callable(flush):
            flush()

    def close(self) -> None:
        """Flushes and closes the backend (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        self._close()

    def shutdown(self) -> None:
        """Same as :meth:`close` (TorchRL's name)."""
        self.close()

    def _close(self) -> None:
        """Closes the backend's experiment (``finish`` or ``close``, whichever it has)."""
        for name in ("finish", "close"):
            method = getattr(self.experiment, name, None)
            if callable(method):
                method()
                return

    @staticmethod
    def _to_container(cfg: Any) -> dict[str, Any]:
        """A dict of ``cfg``: dicts as they are, OmegaConf configs resolved (when installed)."""
        if isinstance(cfg, dict):
            return cfg
        try:
            from omegaconf import OmegaConf
        except ImportError:
            return dict(cfg)
        if OmegaConf.is_config(cfg):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
        return dict(cfg)
