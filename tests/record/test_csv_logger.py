"""CSVLogger: TorchRL's on-disk layout, video formats (decoded back), errors."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from tensordict import MemoryMappedTensor, TensorDict

import tdrl.record.loggers.csv as csv_module
from tdrl.record.loggers import CSVLogger


def _video(t=5, c=3, h=16, w=24, n=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, t, c, h, w), dtype=torch.uint8, generator=g)


def test_layout_and_scalar_lines(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    root = tmp_path / "exp"
    assert sorted(p.name for p in root.iterdir()) == ["scalars", "texts", "videos"]
    logger.log_scalar("loss", 0.5, step=3)
    logger.log_scalar("loss", torch.tensor(0.25), step=4)
    logger.log_scalar("group/r", 1)  # no step: counts the values logged under the name
    logger.log_scalar("group/r", np.float32(2.0))
    assert (root / "scalars" / "loss.csv").read_text() == "3,0.5\n4,0.25\n"
    assert (root / "scalars" / "group" / "r.csv").read_text() == "0,1.0\n1,2.0\n"
    assert logger.experiment.scalars["loss"] == [(3, 0.5), (4, 0.25)]


def test_default_log_dir_is_csv_logs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger = CSVLogger("exp")
    assert logger.log_dir == "csv_logs" and (tmp_path / "csv_logs" / "exp" / "scalars").is_dir()


def test_log_metrics_dict_and_nested_tensordict(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    out = logger.log_metrics({"a": torch.tensor(1.5), "b": 2}, step=7)
    assert out == {"b": 2, "a": 1.5}
    td = TensorDict({"train": {"loss": torch.tensor(0.5)}}, [])
    assert logger.log_metrics(td, step=8, keys_sep="_") == {"train_loss": 0.5}
    scalars = tmp_path / "exp" / "scalars"
    assert (scalars / "a.csv").read_text() == "7,1.5\n"
    assert (scalars / "b.csv").read_text() == "7,2.0\n"
    assert (scalars / "train_loss.csv").read_text() == "8,0.5\n"


def test_hparams_and_text_files(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    logger.log_hparams({"lr": 0.1, "b": [1, 2], "a": "x"})
    logger.log_hparams({"lr": 0.2})
    logger.log_str("note", "hello", step=5)
    texts = tmp_path / "exp" / "texts"
    assert (texts / "hparams0.txt").read_text() == "a: x\nb: [1, 2]\nlr: 0.1"
    assert (texts / "hparams1.txt").read_text() == "lr: 0.2"
    assert (texts / "note5.txt").read_text() == "hello"


def test_video_pt_keeps_the_tensor_and_counts_steps(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    video = _video()
    logger.log_video("vid", video)
    logger.log_video("vid", video)
    logger.log_video("rendering/test", video, step=5)
    videos = tmp_path / "exp" / "videos"
    assert sorted(str(p.relative_to(videos)) for p in videos.rglob("*.pt")) == [
        "rendering/test_5.pt",
        "vid_0.pt",
        "vid_1.pt",
    ]
    assert torch.equal(torch.load(videos / "vid_1.pt", weights_only=True), video)


def test_video_memmap(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="memmap")
    video = _video()
    logger.log_video("vid", video, step=2)
    path = tmp_path / "exp" / "videos" / "vid_2.memmap"
    back = MemoryMappedTensor.from_filename(path, dtype=torch.uint8, shape=video.shape)
    assert torch.equal(back, video)


def test_video_mp4_decodes_to_the_frames(tmp_path, decode_mp4):
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="mp4", video_fps=12)
    video = torch.zeros(1, 6, 3, 16, 24, dtype=torch.uint8)
    for t in range(6):  # one flat colour per frame: survives compression
        video[0, t] = torch.tensor([40 * t, 255 - 40 * t, 128], dtype=torch.uint8).view(3, 1, 1)
    logger.log_video("vid", video, step=1, options={"crf": "0"})
    frames = decode_mp4(tmp_path / "exp" / "videos" / "vid_1.mp4")
    assert frames.shape == (6, 16, 24, 3)
    expected = video[0].permute(0, 2, 3, 1).numpy().astype(int)
    assert np.abs(frames.astype(int) - expected).max() <= 3


def test_video_mp4_plays_n_videos_in_a_row_and_grey_becomes_rgb(tmp_path, decode_mp4):
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="mp4")
    logger.log_video("vid", _video(t=3, c=1, n=2, h=8, w=10))
    frames = decode_mp4(tmp_path / "exp" / "videos" / "vid_0.mp4")
    assert frames.shape == (6, 8, 10, 3)


def test_video_mp4_odd_sizes_are_padded_to_even(tmp_path, decode_mp4):
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="mp4")
    logger.log_video("vid", _video(t=2, h=9, w=11))
    assert decode_mp4(tmp_path / "exp" / "videos" / "vid_0.mp4").shape == (2, 10, 12, 3)


def test_video_gif(tmp_path, decode_gif):
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="gif")
    video = torch.zeros(1, 4, 3, 8, 8, dtype=torch.uint8)
    video[0, :, 0] = torch.arange(4, dtype=torch.uint8).view(4, 1, 1) * 60
    logger.log_video("vid", video)
    frames = decode_gif(tmp_path / "exp" / "videos" / "vid_0.gif")
    assert frames.shape == (4, 8, 8, 3)
    assert frames[:, 0, 0, 0].tolist() == [0, 60, 120, 180]


def test_mp4_falls_back_to_gif_without_pyav(tmp_path, monkeypatch, caplog, decode_gif):
    monkeypatch.setattr(csv_module, "has_mp4_encoder", lambda: False)
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="mp4")
    with caplog.at_level("WARNING", logger="tdrl"):
        logger.log_video("vid", _video(t=3))
    assert decode_gif(tmp_path / "exp" / "videos" / "vid_0.gif").shape == (3, 16, 24, 3)
    assert "PyAV is not installed" in caplog.text


@pytest.mark.parametrize(
    "bad",
    [torch.zeros(5, 3, 8, 8, dtype=torch.uint8), torch.zeros(1, 5, 8, 8, 3, dtype=torch.uint8)],
    ids=["4d", "channels-last"],
)
def test_wrong_video_layout_raises(tmp_path, bad):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"CSVLogger.log_video: wrong"):
        logger.log_video("vid", bad)


def test_errors(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    with pytest.raises(NotImplementedError, match="CSV files hold no histograms"):
        logger.log_histogram("h", [1, 2])
    with pytest.raises(TypeError, match="'v' is not a single number"):
        logger.log_scalar("v", torch.ones(2))
    with pytest.raises(ValueError, match="unknown video format"):
        CSVLogger("exp2", log_dir=str(tmp_path), video_format="avi")


def test_pickles_and_copies_without_open_files(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    logger.log_scalar("a", 1.0, step=0)
    for twin in (pickle.loads(pickle.dumps(logger)), copy.deepcopy(logger)):
        twin.log_scalar("a", 2.0, step=1)
        twin.close()
    logger.close()
    assert (tmp_path / "exp" / "scalars" / "a.csv").read_text() == "0,1.0\n1,2.0\n1,2.0\n"


def test_close_is_idempotent_and_writes_reopen(tmp_path):
    logger = CSVLogger("exp", log_dir=str(tmp_path))
    assert logger.start() is logger and logger.client() is logger and logger.is_alive
    assert logger.service_backend == "direct"
    logger.log_scalar("a", 1.0, step=0)
    logger.close()
    logger.close()
    assert not logger.is_alive
    with pytest.raises(RuntimeError, match="the logger is closed"):
        logger.start()
    logger.experiment.add_scalar("a", 2.0, 1)
    assert (tmp_path / "exp" / "scalars" / "a.csv").read_text() == "0,1.0\n1,2.0\n"
