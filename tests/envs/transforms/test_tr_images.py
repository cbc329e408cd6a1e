"""ToTensorImage, Resize, GrayScale, Crop and CenterCrop (pure torch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from tdrl.envs import (
    CenterCrop,
    Compose,
    Crop,
    GrayScale,
    Resize,
    ToTensorImage,
    TransformedEnv,
)
from tdrl.specs import Bounded, Composite
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
    # TorchRL's (torchvision's) coefficients
    gray = (img * torch.tensor([0.2989, 0.587, 0.114]).reshape(3, 1, 1)).sum(-3, keepdim=True)
    torch.testing.assert_close(td["gray"], gray)
    # TorchRL hands [w, h] to torchvision's antialiased resize: w rows, h columns
    ref = F.interpolate(
        gray.reshape(-1, 1, 6, 8), size=(4, 3), mode="bilinear", align_corners=False, antialias=True
    )
    torch.testing.assert_close(td["small"], ref.reshape(*batch, 1, 4, 3))
    spec = env.full_observation_spec
    assert isinstance(spec["img"], Bounded) and spec["img"].high.max() == 1.0
    assert spec["small"].shape == (*batch, 1, 4, 3)


def test_integer_images_keep_their_dtype():
    t = Compose(GrayScale(), Resize(2, 2, interpolation="nearest"))
    td = t(TensorDict(pixels=torch.full((2, 3, 4, 4), 200, dtype=torch.uint8)))
    assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (2, 1, 2, 2)
    assert td["pixels"].eq(199).all()  # 199.98 truncated, as TorchRL


def test_grayscale_truncates_integers_and_maps_bounds_as_torchrl():
    rgb = torch.tensor([200, 201, 255], dtype=torch.uint8).reshape(3, 1, 1)
    out = GrayScale("p")(TensorDict(p=rgb))["p"]
    assert out.flatten().tolist() == [206]  # 0.2989 * 200 + 0.587 * 201 + 0.114 * 255 = 206.84
    spec = Bounded(0, 255, shape=(3, 2, 2), dtype=torch.uint8)
    gray = GrayScale("p").transform_observation_spec(Composite(p=spec))["p"]
    assert gray.shape == (1, 2, 2) and gray.high.unique().tolist() == [254]
    spec = Bounded(0.0, 1.0, shape=(3, 2, 2))
    gray = GrayScale("p").transform_observation_spec(Composite(p=spec))["p"]
    torch.testing.assert_close(gray.high, torch.full((1, 2, 2), 0.9999))


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


class TestCropContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return Compose(ToTensorImage(), Crop(4, 5, 1, 2))


class TestCenterCropContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return Compose(ToTensorImage(), CenterCrop(3))


def test_crop_windows_follow_torchrl():
    img = torch.arange(2 * 6 * 8.0).reshape(2, 1, 6, 8)
    td = TensorDict(pixels=img, batch_size=[2])
    torch.testing.assert_close(Crop(2, 3, 1, 4)(td.clone())["pixels"], img[..., 1:3, 4:7])
    torch.testing.assert_close(Crop(3)(td.clone())["pixels"], img[..., 0:3, 0:3])
    # torchvision's center_crop: top = round((6 - 3) / 2) = 2, left = round((8 - 5) / 2) = 2
    torch.testing.assert_close(CenterCrop(3, 5)(td.clone())["pixels"], img[..., 2:5, 2:7])
    env = TransformedEnv(TransformTestEnv((2,)), Compose(ToTensorImage(), CenterCrop(4, 2)))
    assert env.full_observation_spec["pixels"].shape == (2, 3, 4, 2)
    assert env.reset()["pixels"].shape == (2, 3, 4, 2)
    with pytest.raises(ValueError, match=r"Crop._apply_transform: the window does not fit"):
        Crop(4, 4, 3, 0)(td.clone())
    with pytest.raises(ValueError, match=r"CenterCrop._apply_transform: the window does not fit"):
        TransformedEnv(TransformTestEnv(), Compose(ToTensorImage(), CenterCrop(7)))
