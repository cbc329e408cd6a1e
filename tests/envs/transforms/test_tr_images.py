"""ToTensorImage, Resize and GrayScale (pure torch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from tdrl.envs import Compose, GrayScale, Resize, ToTensorImage, TransformedEnv
from tdrl.specs import Bounded
from tdrl.testing import TransformContract, TransformTestEnv


class TestToTensorImageContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return ToTensorImage()


class TestResizeContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return Compose(ToTensorImage(), Resize(5, 4))


class TestGrayScaleContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return Compose(ToTensorImage(), GrayScale())


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_pipeline_values(batch):
    env = TransformedEnv(
        TransformTestEnv(batch),
        Compose(
            ToTensorImage(out_keys="img"),
            GrayScale("img", "gray"),
            Resize(4, 3, in_keys="gray", out_keys="small"),
        ),
    )
    td = env.reset()
    img = td["pixels"].permute(*range(len(batch)), -1, -3, -2).float() / 255
    torch.testing.assert_close(td["img"], img)
    gray = (img * torch.tensor([0.299, 0.587, 0.114]).reshape(3, 1, 1)).sum(-3, keepdim=True)
    torch.testing.assert_close(td["gray"], gray)
    ref = F.interpolate(
        gray.reshape(-1, 1, 6, 8), size=(3, 4), mode="bilinear", align_corners=False
    )
    torch.testing.assert_close(td["small"], ref.reshape(*batch, 1, 3, 4))
    spec = env.full_observation_spec
    assert isinstance(spec["img"], Bounded) and spec["img"].high.max() == 1.0
    assert spec["small"].shape == (*batch, 1, 3, 4)


def test_integer_images_keep_their_dtype():
    t = Compose(GrayScale(), Resize(2, 2, interpolation="nearest"))
    td = t(TensorDict(pixels=torch.full((2, 3, 4, 4), 200, dtype=torch.uint8)))
    assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (2, 1, 2, 2)
    assert td["pixels"].eq(200).all()


def test_bad_images_are_reported():
    with pytest.raises(ValueError, match=r"GrayScale.*\[\.\.\., 3, H, W\]"):
        GrayScale()(TensorDict(pixels=torch.zeros(4, 5, 5)))
    with pytest.raises(ValueError, match="unknown interpolation"):
        Resize(3, interpolation="lanczos")
    with pytest.raises(ValueError, match=r"ToTensorImage.*\[\.\.\., H, W, C\]"):
        ToTensorImage()(TensorDict(pixels=torch.zeros(4, 5)))


def test_resize_takes_interpolation_third_as_torchrl():
    td = TensorDict(pixels=torch.arange(16.0).reshape(1, 4, 4))
    nearest = Resize(2, 2, "nearest")(td.clone())["pixels"]
    assert nearest.tolist() == [[[0.0, 2.0], [8.0, 10.0]]]  # every other pixel, no averaging
    with pytest.raises(ValueError, match="unknown interpolation"):
        Resize(2, 2, "pixels")
