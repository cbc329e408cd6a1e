"""TensorboardLogger: event files read back with TensorBoard's EventAccumulator."""

from __future__ import annotations

import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tdrl.record.loggers import TensorboardLogger


def _read(log_dir: str) -> EventAccumulator:
    acc = EventAccumulator(log_dir, size_guidance={"images": 0, "scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def test_scalars_and_log_dir(tmp_path):
    logger = TensorboardLogger("exp", log_dir=str(tmp_path))
    assert logger.log_dir == str(tmp_path / "exp")
    logger.log_scalar("loss", 0.5, step=2)
    logger.log_scalar("loss", 0.25, step=5)
    logger.log_metrics({"train/return": torch.tensor(3.0)}, step=5)
    logger.close()
    acc = _read(logger.log_dir)
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(2, 0.5), (5, 0.25)]
    assert [(e.step, e.value) for e in acc.Scalars("train/return")] == [(5, 3.0)]


def test_default_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger = TensorboardLogger("exp")
    logger.close()
    assert logger.log_dir == "tb_logs/exp" and (tmp_path / "tb_logs" / "exp").is_dir()


def test_video_is_an_animated_gif_of_the_tiled_videos(tmp_path, decode_gif):
    logger = TensorboardLogger("exp", log_dir=str(tmp_path))
    video = torch.zeros(3, 4, 3, 8, 10, dtype=torch.uint8)
    video[1] = 200  # the second video, second from the left of a 1 x 4 grid (3 padded to 4)
    video[0, :, :, 0, 0] = torch.arange(4, dtype=torch.uint8).view(4, 1) * 50  # frames differ
    logger.log_video("rollout", video, step=7, fps=10)
    logger.close()
    (image,) = _read(logger.log_dir).Images("rollout")
    assert (image.step, image.width, image.height) == (7, 40, 8)
    frames = decode_gif(image.encoded_image_string)
    assert frames.shape == (4, 8, 40, 3)
    assert frames[:, :, 10:20].min() == 200 and frames[:, 1:, :10].max() == 0
    assert frames[:, 0, 0, 0].tolist() == [0, 50, 100, 150]
    assert frames[:, :, 20:].max() == 0


def test_float_video_in_unit_range_is_scaled(tmp_path, decode_gif):
    logger = TensorboardLogger("exp", log_dir=str(tmp_path))
    logger.log_video("v", torch.ones(1, 2, 1, 4, 4))
    logger.close()
    (image,) = _read(logger.log_dir).Images("v")
    assert decode_gif(image.encoded_image_string).min() == 255  # 1.0 -> 255, grey -> RGB


def test_histogram_text_and_hparams(tmp_path):
    logger = TensorboardLogger("exp", log_dir=str(tmp_path))
    logger.log_histogram("w", torch.arange(100.0), step=3)  # bins default (TorchRL: KeyError)
    logger.log_str("note", "hello", step=1)
    logger.log_hparams({"lr": 0.1, "algo": "ppo"})
    logger.close()
    acc = _read(logger.log_dir)
    (hist,) = acc.Histograms("w")
    assert hist.step == 3 and hist.histogram_value.num == 100
    tensors = acc.Tags()["tensors"]
    assert "note/text_summary" in tensors
    runs = [p for p in (tmp_path / "exp").iterdir() if p.is_dir()]
    assert runs, "add_hparams writes its run in a sub-folder"


def test_unknown_keywords_raise(tmp_path):
    logger = TensorboardLogger("exp", log_dir=str(tmp_path))
    with pytest.raises(TypeError, match="unknown arguments"):
        logger.log_video("v", torch.zeros(1, 2, 3, 4, 4, dtype=torch.uint8), codec="x")
    with pytest.raises(TypeError, match="unknown arguments"):
        logger.log_histogram("h", [1.0], color="red")
    logger.close()


def test_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r"tdrl\[record\]"):
        TensorboardLogger("exp", log_dir=str(tmp_path))
