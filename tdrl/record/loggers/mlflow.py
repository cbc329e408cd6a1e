"""MLFlowLogger: an MLflow run in a tracking store (a local folder, a database, a server)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.record.loggers._video import check_video, write_mp4
from tdrl.record.loggers.common import Logger, metrics_to_python

__all__ = ["MLFlowLogger"]


def _import_mlflow(where: str) -> Any:
    try:
        import mlflow
    except ImportError as err:
        raise ImportError(
            f"{where}: MLflow is not installed (got no 'mlflow' module; expected it installed). "
            "pip install 'tdrl[record]' (or pip install mlflow-skinny)."
        ) from err
    return mlflow


class MLFlowLogger(Logger):
    """Logs to a new MLflow run of the experiment ``exp_name`` (created when missing).

    The logger talks to its store through its own ``MlflowClient`` (``mlflow_client``) bound to ``tracking_uri``
    and its run id: it neither sets mlflow's global tracking URI nor starts a global active
    run, so several loggers can log side by side. ``self.experiment`` is the run
    (``experiment.info.run_id``).

    A ``file:`` tracking URI is a local folder. MLflow 3.10+ refuses its file store unless
    ``MLFLOW_ALLOW_FILE_STORE`` is true; asking for a ``file:`` URI sets it to ``"true"`` for
    this process when it is unset (set it to ``"false"`` yourself to get MLflow's refusal).

    Needs ``mlflow`` (``pip install 'tdrl[record]'`` installs the client, ``mlflow-skinny``);
    videos need PyAV.

    Args:
        exp_name: the MLflow experiment's name.
        tracking_uri: the store, e.g. ``"file:///tmp/mlruns"`` or ``"sqlite:///mlflow.db"``.
        tags: tags of the experiment when it is created.
        artifact_location: where a new experiment keeps artifacts (default: the store's
            choice; the tracking folder itself for a ``file:`` URI).
        video_fps: frames per second of videos (default 30).

    Examples:
        >>> import pathlib, tempfile
        >>> # skipped here (MLflow takes seconds to import); tests/record/test_mlflow_logger.py
        >>> with tempfile.TemporaryDirectory() as d:  # doctest: +SKIP
        ...     logger = MLFlowLogger("exp", pathlib.Path(d).as_uri())
        ...     logger.log_scalar("loss", 0.5, step=1)
        ...     logger.close()
    """

    def __init__(
        self,
        exp_name: str,
        tracking_uri: str,
        tags: dict[str, Any] | None = None,
        *,
        artifact_location: str | None = None,
        video_fps: int = 30,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(
                f"MLFlowLogger.__init__: unknown arguments (got {sorted(kwargs)}; expected "
                "exp_name, tracking_uri, tags, artifact_location, video_fps). Drop them."
            )
        tracking_uri = str(tracking_uri)
        if tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            if artifact_location is None:
                artifact_location = tracking_uri
        self.tracking_uri = tracking_uri
        self.tags = tags
        self.artifact_location = artifact_location
        self.video_fps = video_fps
        self.video_log_counter = 0
        super().__init__(exp_name=exp_name, log_dir=tracking_uri)

    def _create_experiment(self) -> Any:
        mlflow = _import_mlflow("MLFlowLogger.__init__")
        self.mlflow_client = mlflow.tracking.MlflowClient(tracking_uri=self.tracking_uri)
        found = self.mlflow_client.get_experiment_by_name(self.exp_name)
        if found is None:
            self.id = self.mlflow_client.create_experiment(
                self.exp_name, artifact_location=self.artifact_location, tags=self.tags
            )
        else:
            self.id = found.experiment_id
        run = self.mlflow_client.create_run(self.id, run_name=self.exp_name)
        self.run_id = run.info.run_id
        return run

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Logs a metric value at ``step`` (0 when None, MLflow's default)."""
        if isinstance(value, torch.Tensor):
            value = value.item()
        self.mlflow_client.log_metric(self.run_id, name, float(value), step=step)

    def log_metrics(
        self,
        metrics: Mapping[str, Any] | TensorDictBase,
        step: int | None = None,
        *,
        keys_sep: str = "/",
    ) -> dict[str, Any]:
        """Logs every scalar of ``metrics`` in one request; returns them as Python values."""
        from mlflow.entities import Metric

        values = metrics_to_python(metrics, keys_sep=keys_sep)
        stamp = int(time.time() * 1000)
        batch = [Metric(k, float(v), stamp, step or 0) for k, v in values.items()]
        self.mlflow_client.log_batch(self.run_id, metrics=batch)
        return values

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs an MP4 artifact under ``videos/``: ``<name>_step_<step:04>.mp4`` (or
        ``<name>.mp4`` without a step). Of ``[N, T, C, H, W]`` only the last video is kept,
        as in TorchRL.

        Args:
            name: the file's base name.
            video: uint8 (or float in ``[0, 1]``) ``((N), T, 3, H, W)``.
            step: the step in the file name.

        Keyword Args:
            fps: frames per second (default ``video_fps``).

        Raises:
            ValueError: the video does not have 3 channels.
        """
        video = check_video(video, "MLFlowLogger.log_video")[-1]
        if video.shape[1] != 3:
            raise ValueError(
                f"MLFlowLogger.log_video: MLflow videos need 3 colour channels (got shape "
                f"{tuple(video.shape)}; expected (T, 3, H, W)). Expand grey frames with "
                "video.expand(-1, 3, -1, -1)."
            )
        fps = kwargs.pop("fps", self.video_fps)
        self.video_log_counter += 1
        file_name = f"{name}_step_{step:04}.mp4" if step else f"{name}.mp4"
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, file_name.replace("/", "_"))
            write_mp4(path, video, fps)
            self.mlflow_client.log_artifact(self.run_id, path, "videos")

    def log_hparams(self, cfg: Any) -> None:
        """Logs the entries of ``cfg`` as the run's parameters (values as strings)."""
        from mlflow.entities import Param

        params = [Param(str(k), str(v)) for k, v in self._to_container(cfg).items()]
        self.mlflow_client.log_batch(self.run_id, params=params)

    def log_str(self, name: str, value: str, step: int | None = None) -> None:
        """Logs ``value`` as a text artifact ``<name>[_<step>].txt``."""
        suffix = f"_{step}" if step is not None else ""
        self.mlflow_client.log_text(self.run_id, value, f"{name}{suffix}.txt")

    def log_histogram(self, name: str, data: Sequence[Any], **kwargs: Any) -> None:
        """Not available in MLflow (TorchRL's behaviour).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            f"MLFlowLogger.log_histogram: MLflow holds no histograms (got name={name!r}). Use "
            "TensorboardLogger or WandbLogger for histograms."
        )

    def flush(self) -> None:
        """MLflow writes each call at once: nothing to flush."""

    def _close(self) -> None:
        self.mlflow_client.set_terminated(self.run_id)

    def __repr__(self) -> str:
        return f"MLFlowLogger(experiment={self.experiment!r})"
