"""WandbLogger: a Weights & Biases run (online, or offline in a local folder)."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.record.loggers._video import (
    check_video,
    has_mp4_encoder,
    tile_videos,
    write_gif,
    write_mp4,
)
from tdrl.record.loggers.common import Logger, metrics_to_python

__all__ = ["WandbLogger"]


def _import_wandb(where: str) -> Any:
    try:
        import wandb
    except ImportError as err:
        raise ImportError(
            f"{where}: Weights & Biases is not installed (got no 'wandb' module; expected it "
            "installed). pip install 'tdrl[record]' (or pip install wandb)."
        ) from err
    return wandb


def _env_metadata() -> dict[str, Any]:
    """The Python runtime, the installed packages and the editable installs' sources."""
    packages: dict[str, str] = {}
    editable: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.name
        if name is None:
            continue
        packages[name] = dist.version
        url = dist.read_text("direct_url.json")
        if url:
            info = json.loads(url)
            if info.get("dir_info", {}).get("editable"):
                editable[name] = info.get("url")
    return {
        "python": {
            "version": sys.version,
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
            "platform": platform.platform(),
        },
        "packages": dict(sorted(packages.items())),
        "editable_sources": dict(sorted(editable.items())),
    }


class WandbLogger(Logger):
    """Logs to a Weights & Biases run (``wandb.init``), TorchRL's arguments and step handling.

    Every metric ``"<prefix>/<name>"`` is plotted against its own step metric
    ``"<prefix>/step"`` (``"step"`` for names without ``/``): ``step`` given to a ``log_*``
    call sets it, otherwise it counts up from 0 per step metric. ``override_global_step=True``
    passes ``step`` to wandb's global step instead.

    Needs ``wandb`` (``pip install 'tdrl[record]'``). Videos are encoded here (MP4 with PyAV,
    else GIF), so wandb's moviepy dependency is not needed.

    Args:
        exp_name: the run's name.
        offline: keep the run in the local folder only (``mode="offline"``; ``wandb sync``
            uploads it later).
        save_dir: the folder wandb writes to (``log_dir`` is accepted as a synonym).
        id: the run id (to resume a run).
        project: the W&B project.
        base_url: the W&B server URL.
        video_fps: frames per second of videos (default 32).
        log_env_packages: record the Python version and installed packages in the run's
            config under ``"env"``.
        **kwargs: passed to ``wandb.init`` (``mode``, ``group``, ``tags``, ``config``...).

    Examples:
        >>> import tempfile
        >>> # skipped here (it starts a W&B service); tests/record/test_wandb_logger.py runs it
        >>> with tempfile.TemporaryDirectory() as d:  # doctest: +SKIP
        ...     logger = WandbLogger("exp", offline=True, save_dir=d, project="demo")
        ...     logger.log_scalar("train/loss", 0.5)  # plotted against "train/step" = 0
        ...     logger.close()
    """

    def __init__(
        self,
        exp_name: str,
        offline: bool = False,
        save_dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        project: str | None = None,
        base_url: str | None = None,
        *,
        video_fps: int = 32,
        log_env_packages: bool = True,
        **kwargs: Any,
    ) -> None:
        log_dir = kwargs.pop("log_dir", None) or None
        save_dir = save_dir or None
        if save_dir is not None and log_dir is not None:
            raise ValueError(
                f"WandbLogger.__init__: save_dir and log_dir name the same folder (got "
                f"save_dir={save_dir!r} and log_dir={log_dir!r}; expected one of them). Pass "
                "only one."
            )
        folder = save_dir if save_dir is not None else log_dir
        if folder is not None:
            folder = os.path.expanduser(os.fspath(folder))
            os.makedirs(folder, exist_ok=True)
        self.offline = offline
        self.save_dir = folder
        self.id = id
        self.project = project
        self.base_url = base_url
        self.video_fps = video_fps
        self.log_env_packages = log_env_packages
        self._step_registry: dict[str, int] = {}
        self._defined: set[tuple[str, str | None]] = set()
        if offline:
            kwargs.setdefault("mode", "offline")
        self._wandb_kwargs = {
            "name": exp_name,
            "dir": folder,
            "id": id,
            "project": project,
            "resume": "allow",
            **kwargs,
        }
        super().__init__(exp_name=exp_name, log_dir=folder)
        if log_env_packages:
            self.experiment.config.update({"env": _env_metadata()}, allow_val_change=True)

    def _create_experiment(self) -> Any:
        wandb = _import_wandb("WandbLogger.__init__")
        if self.base_url is not None:
            settings = self._wandb_kwargs.get("settings")
            if settings is None:
                settings = wandb.Settings(base_url=self.base_url)
            elif isinstance(settings, Mapping):
                settings = wandb.Settings(**{**settings, "base_url": self.base_url})
            else:
                settings.base_url = self.base_url
            self._wandb_kwargs["settings"] = settings
            if not self.offline:
                wandb.login(host=self.base_url, key=getattr(settings, "api_key", None))
        return wandb.init(**self._wandb_kwargs)

    # ------------------------------------------------------------------ steps
    @staticmethod
    def _is_step_key(name: str) -> bool:
        return name == "step" or name.endswith("/step")

    @staticmethod
    def _step_key(name: str) -> str:
        prefix, sep, _ = name.rpartition("/")
        return f"{prefix}/step" if sep else "step"

    def _consume_step(self, key: str, step: int | None) -> int:
        last = self._step_registry.get(key, -1)
        if step is None:
            step = last + 1
        self._step_registry[key] = max(last, step)
        return step

    def _define(self, name: str, step_metric: str | None) -> None:
        if (name, step_metric) in self._defined:
            return
        self._defined.add((name, step_metric))
        if step_metric is None:
            self.experiment.define_metric(name)
        else:
            self.experiment.define_metric(name, step_metric=step_metric)

    def _log_payload(
        self,
        payload: dict[str, Any],
        *,
        step: int | None = None,
        override_global_step: bool = False,
        **kwargs: Any,
    ) -> None:
        if override_global_step:
            self.experiment.log(payload, step=step, **kwargs)
            return
        prepared = dict(payload)
        for key, value in payload.items():
            if self._is_step_key(key):
                self._consume_step(key, value)
        for key in payload:
            if not self._is_step_key(key):
                step_key = self._step_key(key)
                if step_key not in prepared:
                    prepared[step_key] = self._consume_step(step_key, step)
        for key in prepared:
            if self._is_step_key(key):
                self._define(key, None)
        for key in prepared:
            if not self._is_step_key(key):
                self._define(key, self._step_key(key))
        self.experiment.log(prepared, **kwargs)

    # ------------------------------------------------------------------ logging
    def log_scalar(
        self,
        name: str,
        value: float,
        step: int | None = None,
        commit: bool = True,
        *,
        override_global_step: bool = False,
    ) -> None:
        """Logs a scalar (``commit=False`` keeps wandb's history row open for more keys)."""
        self._log_payload(
            {name: value}, step=step, commit=commit, override_global_step=override_global_step
        )

    def log_metrics(
        self,
        metrics: Mapping[str, Any] | TensorDictBase,
        step: int | None = None,
        *,
        keys_sep: str = "/",
        override_global_step: bool = False,
    ) -> dict[str, Any]:
        """Logs every scalar of ``metrics`` in one history row; returns them as Python values."""
        values = metrics_to_python(metrics, keys_sep=keys_sep)
        self._log_payload(values, step=step, override_global_step=override_global_step)
        return values

    def log_video(
        self, name: str, video: torch.Tensor, step: int | None = None, **kwargs: Any
    ) -> None:
        """Logs a video (``wandb.Video``): the N videos of ``((N), T, C, H, W)`` side by side.

        Args:
            name: the key.
            video: uint8 (or float in ``[0, 1]``) ``((N), T, C, H, W)``, 1 or 3 channels.
            step: the step of the video's step metric.

        Keyword Args:
            fps: frames per second (default ``video_fps``).
            format: ``"mp4"`` (default; GIF when PyAV is missing) or ``"gif"``.
            override_global_step: see the class docstring.
            **kwargs: passed to ``run.log``.
        """
        wandb = _import_wandb("WandbLogger.log_video")
        frames = tile_videos(check_video(video, "WandbLogger.log_video"))
        fps = kwargs.pop("fps", self.video_fps)
        fmt = kwargs.pop("format", "mp4")
        if fmt not in ("mp4", "gif"):
            raise ValueError(
                f"WandbLogger.log_video: unknown video format (got {fmt!r}; expected 'mp4' or "
                "'gif'). Pick one of them."
            )
        if fmt == "mp4" and not has_mp4_encoder():
            fmt = "gif"
        override = kwargs.pop("override_global_step", False)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name.replace('/', '_')}.{fmt}")
            if fmt == "mp4":
                write_mp4(path, frames, fps)
            else:
                write_gif(path, frames, fps)
            # wandb copies the file into the run's media folder while logging it
            media = wandb.Video(path, format=fmt)
            self._log_payload({name: media}, step=step, override_global_step=override, **kwargs)

    def log_hparams(self, cfg: Any) -> None:
        """Updates the run's config with ``cfg``."""
        self.experiment.config.update(self._to_container(cfg), allow_val_change=True)

    def log_histogram(self, name: str, data: Sequence[Any], **kwargs: Any) -> None:
        """Logs a ``wandb.Histogram`` (keywords: ``step``, ``bins`` (default 64),
        ``override_global_step``; others go to ``run.log``)."""
        wandb = _import_wandb("WandbLogger.log_histogram")
        bins = kwargs.pop("bins", None)
        step = kwargs.pop("step", None)
        hist = wandb.Histogram(data, num_bins=64 if bins is None else bins)
        self._log_payload(
            {name: hist},
            step=step,
            override_global_step=kwargs.pop("override_global_step", False),
            **kwargs,
        )

    def log_str(
        self,
        name: str,
        value: str,
        step: int | None = None,
        *,
        override_global_step: bool = False,
    ) -> None:
        """Logs a string: as it is with a ``step``, else as a one-cell ``wandb.Table``."""
        wandb = _import_wandb("WandbLogger.log_str")
        entry = value if step is not None else wandb.Table(columns=["text"], data=[[value]])
        self._log_payload({name: entry}, step=step, override_global_step=override_global_step)

    def __repr__(self) -> str:
        return f"WandbLogger(experiment={self.experiment!r})"
