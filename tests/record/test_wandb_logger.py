"""WandbLogger: a real offline W&B run, its history read back from the run folder."""

from __future__ import annotations

import sys

import pytest
import torch

from tdrl.record.loggers import WandbLogger


def _run_dir(save_dir):
    (run,) = (save_dir / "wandb").glob("offline-run-*")
    return run


def test_offline_run_history_steps_config_and_media(offline_wandb, wandb_run, decode_mp4):
    save = offline_wandb / "logs"
    logger = WandbLogger("exp", offline=True, save_dir=save, project="p", log_env_packages=True)
    assert logger.experiment.name == "exp" and logger.log_dir == str(save)
    logger.log_scalar("train/loss", 0.5)  # its own step metric: train/step = 0, 1
    logger.log_scalar("train/loss", 0.25)
    logger.log_scalar("r", 1.0, step=10)
    logger.log_metrics({"eval/a": torch.tensor(1.5), "eval/b": 2}, step=4)
    logger.log_hparams({"lr": 0.1})
    video = torch.zeros(1, 5, 3, 16, 24, dtype=torch.uint8)
    video[0, :, 0] = torch.arange(5, dtype=torch.uint8).view(5, 1, 1) * 40
    logger.log_video("rollout/video", video, step=2, fps=8)
    logger.log_str("note", "hello", step=3)
    with pytest.raises(ValueError, match="unknown video format"):
        logger.log_video("v", video, format="avi")
    logger.close()
    logger.close()  # idempotent
    run = _run_dir(save)
    rows = [{k: v for k, v in r.items() if not k.startswith("_")} for r in wandb_run.history(run)]
    assert rows[0] == {"train/loss": 0.5, "train/step": 0}
    assert rows[1] == {"train/loss": 0.25, "train/step": 1}
    assert rows[2] == {"r": 1.0, "step": 10}
    assert rows[3] == {"eval/a": 1.5, "eval/b": 2, "eval/step": 4}
    assert rows[4]["rollout/step"] == 2 and rows[4]["rollout/video/_type"] == "video-file"
    assert rows[5] == {"note": "hello", "step": 3}
    (path,) = (run / "files").rglob("*.mp4")
    frames = decode_mp4(path)
    assert frames.shape == (5, 16, 24, 3)
    config = wandb_run.config(run)
    assert config["lr"] == 0.1
    assert "torch" in config["env"]["packages"]


def test_save_dir_and_log_dir_are_exclusive(offline_wandb):
    with pytest.raises(ValueError, match="save_dir and log_dir name the same folder"):
        WandbLogger("exp", offline=True, save_dir="a", log_dir="b")


def test_missing_wandb_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"tdrl\[record\]"):
        WandbLogger("exp", offline=True, save_dir=tmp_path)
