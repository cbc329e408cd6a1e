"""get_logger and generate_exp_name (TorchRL's scripts' way to make a logger)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tdrl.record.loggers import (
    CSVLogger,
    MLFlowLogger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)


def test_generate_exp_name_format():
    name = generate_exp_name("PPO", "cartpole")
    assert re.fullmatch(r"PPO_cartpole_[0-9a-f]{8}_\d\d_\d\d_\d\d-\d\d_\d\d_\d\d", name), name
    assert generate_exp_name("PPO", "cartpole") != name  # the uuid part


def test_csv_writes_mp4_videos_under_logger_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger = get_logger("csv", logger_name="ppo", experiment_name="run1")
    assert isinstance(logger, CSVLogger) and logger.video_format == "mp4"
    assert logger.experiment.log_dir == "ppo/run1" and (tmp_path / "ppo/run1/scalars").is_dir()


def test_tensorboard(tmp_path):
    logger = get_logger("tensorboard", logger_name=str(tmp_path), experiment_name="run1")
    assert isinstance(logger, TensorboardLogger) and logger.log_dir == str(tmp_path / "run1")
    logger.close()


def test_mlflow_uses_a_file_store_in_logger_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    logger = get_logger("mlflow", "mlruns", "run1", mlflow_kwargs={"video_fps": 12})
    assert isinstance(logger, MLFlowLogger) and logger.video_fps == 12
    assert logger.tracking_uri == (tmp_path / "mlruns").as_uri()
    assert Path(tmp_path / "mlruns").is_dir()
    logger.close()


def test_wandb_gets_its_kwargs(offline_wandb, monkeypatch):
    monkeypatch.chdir(offline_wandb)
    logger = get_logger(
        "wandb",
        "wb",
        "run1",
        wandb_kwargs={"project": "p", "offline": True, "log_env_packages": False},
    )
    assert isinstance(logger, WandbLogger)
    assert (logger.experiment.name, logger.experiment.project, logger.save_dir) == (
        "run1",
        "p",
        "wb",
    )
    logger.close()


@pytest.mark.parametrize("kind", ["", None])
def test_no_logger(kind):
    assert get_logger(kind, "logs", "exp") is None


def test_other_backends_kwargs_are_accepted(tmp_path):
    """Scripts pass wandb_kwargs whatever cfg.logger.backend says."""
    logger = get_logger("csv", str(tmp_path), "exp", wandb_kwargs={"project": "p"})
    assert isinstance(logger, CSVLogger)


def test_errors(tmp_path):
    with pytest.raises(NotImplementedError, match="unsupported logger_type"):
        get_logger("trackio", str(tmp_path), "exp")
    with pytest.raises(TypeError, match=r"unexpected arguments \(got \['colour'\]"):
        get_logger("csv", str(tmp_path), "exp", colour="red")
    with pytest.raises(NotImplementedError, match="service_backend is not supported"):
        get_logger("csv", str(tmp_path), "exp", service_backend="ray")
    with pytest.raises(NotImplementedError, match="state_dict is not supported"):
        get_logger("csv", str(tmp_path), "exp", state_dict={"exp_name": "x"})
    assert get_logger("csv", str(tmp_path), "exp", service_backend="direct") is not None
