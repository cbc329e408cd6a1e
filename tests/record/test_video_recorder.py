"""VideoRecorder: the transform contract, TorchRL's frame handling and defaults, dumps."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import GymEnv, SerialEnv
from tdrl.envs.transforms import Compose, StepCounter, TransformedEnv
from tdrl.record import CSVLogger, VideoRecorder
from tdrl.record._recorder import center_crop, make_video_grid
from tdrl.testing import TransformContract, TransformTestEnv


class ListLogger:
    """Keeps what log_video receives."""

    def __init__(self) -> None:
        self.videos: list[tuple[str, torch.Tensor, dict]] = []

    def log_video(self, name, video, step=None, **kwargs):
        self.videos.append((name, video, {"step": step, **kwargs}))


class TestVideoRecorderContract(TransformContract):
    layouts = ("flat",)  # the nested test env has no frames

    def make_transform(self, layout):
        return VideoRecorder(ListLogger(), tag="contract", in_keys=["pixels"])


def _env(batch_size=(), **kwargs):
    recorder = VideoRecorder(ListLogger(), tag="video", **kwargs)
    return TransformedEnv(TransformTestEnv(batch_size, max_steps=50), recorder), recorder


def _frame(t, batch=()):
    """TransformTestEnv's pixels at step t, channels first."""
    pix = torch.arange(6 * 8 * 3).reshape(6, 8, 3)
    return ((t * 7 + pix) % 256).to(torch.uint8).permute(2, 0, 1).expand(*batch, 3, 6, 8)


def test_single_env_keeps_every_second_frame_by_default():
    env, rec = _env()
    env.rollout(6)  # the reset and 6 steps: 7 frames, t = 0..6
    assert rec.skip == 2 and rec.make_grid
    assert len(rec.obs) == 3
    for kept, t in zip(rec.obs, (1, 3, 5)):
        assert torch.equal(kept, _frame(t))


def test_batched_env_keeps_every_frame_as_a_grid():
    env, rec = _env(batch_size=(3,))
    env.rollout(2)
    assert rec.skip == 1 and len(rec.obs) == 3
    grid = rec.obs[1]
    assert grid.shape == (3, 12, 16)  # 3 frames in a 2 x 2 grid, the last cell black
    assert torch.equal(grid[:, :6, :8], _frame(1)) and torch.equal(grid[:, 6:, :8], _frame(1))
    assert grid[:, 6:, 8:].max() == 0


def test_outside_an_env_a_batch_is_a_sequence():
    rec = VideoRecorder(None, "x")
    assert rec.skip == 1 and not rec.make_grid
    rec(TensorDict(pixels=torch.stack([_frame(t) for t in range(4)]), batch_size=[4]))
    assert len(rec.obs) == 4 and torch.equal(rec.obs[2], _frame(2))


def test_dump_writes_one_video_through_the_logger_and_clears():
    env, rec = _env(skip=1, fps=12)
    env.rollout(3)
    rec.dump()
    rec.dump()  # nothing kept: nothing written, the counter still moves
    env.rollout(1)
    rec.dump(suffix="b", step=100)
    (name, video, kwargs), (name2, video2, kwargs2) = rec.logger.videos
    assert (name, kwargs) == ("video", {"step": 0, "fps": 12})
    assert video.shape == (1, 4, 3, 6, 8) and video.dtype == torch.uint8
    assert torch.equal(video[0, 3], _frame(3))
    assert (name2, kwargs2) == ("video_b", {"step": 100, "fps": 12}) and video2.shape[1] == 2
    assert rec.obs == [] and rec.iter == 3


def test_env_transform_dump_on_a_single_transform_env():
    env, rec = _env(skip=1)
    env.rollout(2)
    env.transform.dump()
    assert len(rec.logger.videos) == 1


def test_frames_are_copies():
    env, rec = _env(skip=1)
    td = env.reset()
    td["pixels"].zero_()  # the caller edits its data
    assert torch.equal(rec.obs[0], _frame(0))


def test_max_frames_and_dump_on_done():
    env, rec = _env(skip=1, max_frames=2)
    env.rollout(5)
    assert len(rec.obs) == 2
    logger = ListLogger()
    rec = VideoRecorder(logger, "ep", skip=1, dump_on_done=True)
    env = TransformedEnv(TransformTestEnv(max_steps=3), rec)
    env.rollout(10, break_when_any_done=False)  # episodes end at steps 3, 6 and 9
    assert [v.shape[1] for _, v, _ in logger.videos] == [4, 4, 4]  # the reset and 3 steps


@pytest.mark.parametrize(
    ("frame", "shape"),
    [
        (torch.zeros(6, 8, 3, dtype=torch.uint8), (3, 6, 8)),
        (torch.zeros(3, 6, 8, dtype=torch.uint8), (3, 6, 8)),
        (torch.zeros(1, 6, 8, dtype=torch.uint8), (3, 6, 8)),  # grey -> RGB, as TorchRL
        (torch.zeros(6, 8, 1, dtype=torch.uint8), (3, 6, 8)),
        (torch.zeros(6, 8, dtype=torch.uint8), (1, 6, 8)),  # a 2-d frame keeps one channel
    ],
    ids=["hwc", "chw", "1hw", "hw1", "hw"],
)
def test_frame_layouts(frame, shape):
    rec = VideoRecorder(None, "x", in_keys=["img"])
    rec(TensorDict(img=frame))
    assert rec.obs[0].shape == shape


def test_not_a_frame_raises():
    rec = VideoRecorder(None, "x", in_keys=["img"])
    with pytest.raises(RuntimeError, match="holds no frame"):
        rec(TensorDict(img=torch.zeros(6, 8, 5)))


def test_center_crop_matches_torchvision_placement():
    frames = torch.arange(2 * 3 * 10 * 12).reshape(2, 3, 10, 12)
    out = center_crop(frames, 4)
    assert out.shape == (2, 3, 4, 4) and torch.equal(out, frames[..., 3:7, 4:8])
    small = center_crop(torch.ones(1, 2, 3), 5)  # padded with zeros around
    assert small.shape == (1, 5, 5) and small.sum() == 6 and small[0, 1:3, 1:4].sum() == 6
    rec = VideoRecorder(None, "x", in_keys=["img"], center_crop=4)
    rec(TensorDict(img=torch.zeros(10, 12, 3, dtype=torch.uint8)))
    assert rec.obs[0].shape == (3, 4, 4)


def test_make_video_grid_layout():
    frames = torch.arange(5, dtype=torch.uint8).view(5, 1, 1, 1).expand(5, 3, 2, 2)
    grid = make_video_grid(frames)  # 3 columns, 2 rows
    assert grid.shape == (3, 4, 6)
    assert grid[0, ::2, ::2].tolist() == [[0, 1, 2], [3, 4, 0]]


def test_out_keys_copy_the_frame_with_its_spec():
    rec = VideoRecorder(None, "x", out_keys=["frame"])
    env = TransformedEnv(TransformTestEnv(), rec)
    assert env.observation_spec["frame"] == env.observation_spec["pixels"]
    td = env.rollout(2)
    assert torch.equal(td["next", "frame"], td["next", "pixels"])


def test_invalid_arguments():
    for name in ("skip", "max_frames", "center_crop"):
        with pytest.raises(ValueError, match=f"{name} must be a positive int"):
            VideoRecorder(None, "x", **{name: 0})


def test_dump_refuses_frames_of_different_sizes():
    rec = VideoRecorder(ListLogger(), "x", in_keys=["img"])
    rec(TensorDict(img=torch.zeros(6, 8, 3, dtype=torch.uint8)))
    rec(TensorDict(img=torch.zeros(4, 8, 3, dtype=torch.uint8)))
    with pytest.raises(RuntimeError, match="differ in shape"):
        rec.dump()


def test_in_a_compose_and_outside_a_serial_env():
    rec = VideoRecorder(ListLogger(), "x")
    env = TransformedEnv(
        SerialEnv(2, lambda: TransformTestEnv(max_steps=50)), Compose(StepCounter(), rec)
    )
    env.rollout(3)
    assert rec.skip == 1 and len(rec.obs) == 4 and rec.obs[0].shape == (3, 6, 16)


def test_to_animation():
    pytest.importorskip("matplotlib")
    env, rec = _env(skip=1)
    env.rollout(2)
    anim = rec.to_animation(title="t", clear=True)
    assert len(anim._framedata) == 3 and rec.obs == []
    with pytest.raises(RuntimeError, match="no frame was recorded"):
        rec.to_animation()


def test_gym_cartpole_from_pixels_to_mp4(tmp_path, decode_mp4):
    logger = CSVLogger("exp", log_dir=str(tmp_path), video_format="mp4")
    env = GymEnv("CartPole-v1", from_pixels=True, pixels_only=False)
    env = env.append_transform(VideoRecorder(logger, tag="rendering/test", in_keys=["pixels"]))
    env.set_seed(0)
    td = env.rollout(7)
    env.transform.dump()
    frames = decode_mp4(tmp_path / "exp" / "videos" / "rendering" / "test_0.mp4")
    assert frames.shape == (4, 400, 600, 3)  # 8 frames (reset + 7 steps), one in two kept
    diff = frames[0].astype(int) - td["next", "pixels"][0].numpy().astype(int)
    assert abs(diff).mean() < 3  # lossy, but the same picture
    env.close()
