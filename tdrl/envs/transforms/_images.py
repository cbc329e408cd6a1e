"""Image transforms in pure torch: ToTensorImage, Resize, GrayScale, Crop and CenterCrop."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tdrl.envs.transforms._area_resize import area_shrink
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Bounded, TensorSpec, Unbounded

__all__ = ["CenterCrop", "Crop", "GrayScale", "Resize", "ToTensorImage"]


def _check_image(
    name: str, value: torch.Tensor, channels: int | None = None, want: str = "[..., C, H, W]"
) -> None:
    if value.ndim < 3 or (channels is not None and value.shape[-3] != channels):
        want = f"[..., {channels}, H, W]" if channels is not None else want
        raise ValueError(
            f"{name}: expected an image of shape {want} (got shape {tuple(value.shape)}). "
            "Apply ToTensorImage first or fix the keys."
        )


def _same_bounds(spec: TensorSpec, shape: torch.Size, dtype: torch.dtype) -> TensorSpec:
    """A spec of the new shape keeping the (scalar) range of ``spec``."""
    if isinstance(spec, Bounded):
        return Bounded(
            spec.low.min(), spec.high.max(), shape=shape, device=spec.device, dtype=dtype
        )
    return Unbounded(shape, spec.device, dtype=dtype)


class ToTensorImage(Transform):
    """``[..., H, W, C]`` images to ``[..., C, H, W]`` floats; integer pixels are divided by 255.

    Args:
        from_int: divide by 255 (``None``: only when the input is not floating point; ``True``:
            always; ``False``: never).
        unsqueeze: add a leading dim of size 1 to images with exactly 3 dims (unbatched).
        dtype: the float dtype of the result (``None``: ``torch.get_default_dtype()``).
        in_keys: image entries (keyword-only; ``None``: ``"pixels"``).
        out_keys: where the results go (default: in place).
        shape_tolerant: leave images whose last dim is not 3 unpermuted (already channel-first).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), ToTensorImage())
        >>> px = env.reset()["pixels"]
        >>> px.shape, px.dtype, float(px.max()) <= 1.0
        (torch.Size([3, 6, 8]), torch.float32, True)
    """

    def __init__(
        self,
        from_int: bool | None = None,
        unsqueeze: bool = False,
        dtype: torch.dtype | None = None,
        *,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        shape_tolerant: bool = False,
    ) -> None:
        super().__init__(in_keys="pixels" if in_keys is None else in_keys, out_keys=out_keys)
        self.from_int = from_int
        self.unsqueeze = bool(unsqueeze)
        self.dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.shape_tolerant = bool(shape_tolerant)

    def _permutes(self, shape: torch.Size) -> bool:
        return not self.shape_tolerant or (len(shape) > 0 and shape[-1] == 3)

    def _scales(self, dtype: torch.dtype | None) -> bool:
        if self.from_int is None:
            return dtype is not None and not dtype.is_floating_point
        return self.from_int

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("ToTensorImage._apply_transform", value, want="[..., H, W, C]")
        out = value.movedim(-1, -3) if self._permutes(value.shape) else value
        out = out.to(self.dtype)
        if self._scales(value.dtype):
            out = out / 255.0
        if self.unsqueeze and value.ndim == 3:
            out = out.unsqueeze(0)
        return out

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        shape = spec.shape
        if self._permutes(shape):
            shape = torch.empty(shape, device="meta").movedim(-1, -3).shape
        if self.unsqueeze and len(spec.shape) == 3:
            shape = torch.Size((1, *shape))
        if self._scales(spec.dtype):
            if isinstance(spec, Bounded):
                low, high = spec.low.min() / 255.0, spec.high.max() / 255.0
            elif spec.dtype is not None and not spec.dtype.is_floating_point:
                low, high = torch.tensor(0.0), torch.tensor(1.0)  # 8-bit pixels
            else:
                return Unbounded(shape, spec.device, dtype=self.dtype)
            return Bounded(low, high, shape=shape, device=spec.device, dtype=self.dtype)
        return _same_bounds(spec, shape, self.dtype)


class Resize(Transform):
    """Resizes ``[..., C, H, W]`` images to ``[..., C, w, h]`` with ``F.interpolate``.

    As in TorchRL (which hands ``[w, h]`` to torchvision's ``resize``), ``w`` is the number of
    rows and ``h`` the number of columns of the result; bilinear and bicubic resizing are
    antialiased, as there. Integer images are resized in float and rounded back to their dtype.
    ``"area"`` (a tdrl addition: torchvision has no such mode) shrinks by true area averaging,
    value for value as OpenCV's ``INTER_AREA`` (what gymnasium's ``AtariPreprocessing`` uses);
    enlarging with it falls back to ``F.interpolate``'s ``"area"``.

    Args:
        w: rows of the result (TorchRL's name).
        h: columns of the result (default ``w``).
        in_keys: image entries.
        out_keys: where the results go (default: in place).
        interpolation: ``"bilinear"``, ``"nearest"``, ``"bicubic"`` or ``"area"``.

    Examples:
        >>> from tdrl.envs.transforms import ToTensorImage, TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), ToTensorImage())
        >>> env = env.append_transform(Resize(4, 3))
        >>> env.reset()["pixels"].shape
        torch.Size([3, 4, 3])
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        interpolation: str = "bilinear",
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
    ) -> None:
        super().__init__(in_keys="pixels" if in_keys is None else in_keys, out_keys=out_keys)
        if interpolation not in ("bilinear", "nearest", "bicubic", "area"):
            raise ValueError(
                f"Resize.__init__: unknown interpolation (got {interpolation!r}; expected "
                "'bilinear', 'nearest', 'bicubic' or 'area'). Pick one of them."
            )
        self.w, self.h = int(w), int(w if h is None else h)
        self.interpolation = interpolation

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("Resize._apply_transform", value)
        lead, (c, h, w) = value.shape[:-3], value.shape[-3:]
        if self.interpolation == "area" and self.w <= h and self.h <= w:
            return area_shrink(value, self.w, self.h)
        flat = value.reshape(-1, c, h, w)
        x = flat if flat.dtype.is_floating_point else flat.float()
        smooth = self.interpolation in ("bilinear", "bicubic")
        kwargs = {"align_corners": False, "antialias": True} if smooth else {}
        out = F.interpolate(x, size=(self.w, self.h), mode=self.interpolation, **kwargs)
        if not value.dtype.is_floating_point:
            info = torch.iinfo(value.dtype)
            out = out.round().clamp(info.min, info.max)
        return out.to(value.dtype).reshape(*lead, c, self.w, self.h)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        shape = torch.Size((*spec.shape[:-2], self.w, self.h))
        return _same_bounds(spec, shape, spec.dtype or torch.float32)

    def extra_repr(self) -> str:
        return f"w={self.w}, h={self.h}, {super().extra_repr()}"


class GrayScale(Transform):
    """RGB ``[..., 3, H, W]`` images to luminance ``[..., 1, H, W]``, as TorchRL (and
    torchvision): ``0.2989 * r + 0.587 * g + 0.114 * b``, cast back to the image's dtype, so
    integer images are truncated (not rounded). Bounded specs get their bounds mapped the
    same way (a uint8 ``[0, 255]`` image gives ``[0, 254]``, a float ``[0, 1]`` one
    ``[0, 0.9999]``).

    Args:
        in_keys: image entries (``None``: ``"pixels"``).
        out_keys: where the results go (default: in place).

    Examples:
        >>> from tdrl.envs.transforms import ToTensorImage, TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), ToTensorImage())
        >>> env = env.append_transform(GrayScale())
        >>> env.reset()["pixels"].shape
        torch.Size([1, 6, 8])
    """

    def __init__(self, in_keys: KeysArg = None, out_keys: KeysArg = None) -> None:
        super().__init__(in_keys="pixels" if in_keys is None else in_keys, out_keys=out_keys)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image("GrayScale._apply_transform", value, channels=3)
        return _gray(value)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        shape = torch.Size((*spec.shape[:-3], 1, *spec.shape[-2:]))
        if isinstance(spec, Bounded) and len(spec.shape) >= 3 and spec.shape[-3] == 3:
            low, high = (_gray(b.expand(spec.shape)) for b in (spec.low, spec.high))
            return Bounded(low, high, shape=shape, device=spec.device, dtype=spec.dtype)
        return _same_bounds(spec, shape, spec.dtype or torch.float32)


def _gray(value: torch.Tensor) -> torch.Tensor:
    """TorchRL's (torchvision's) luminance, in its order of operations and dtype rules."""
    r, g, b = value.unbind(-3)
    return (0.2989 * r + 0.587 * g + 0.114 * b).to(value.dtype).unsqueeze(-3)


class Crop(Transform):
    """Keeps the ``w`` x ``h`` window of ``[..., H, W]`` images whose top-left is ``(top, left)``.

    As in TorchRL (torchvision's ``crop(img, top, left, w, h)``), ``w`` is the number of rows
    and ``h`` the number of columns kept. The window must lie inside the image.

    Args:
        w: rows kept.
        h: columns kept (default ``w``).
        top: first row.
        left: first column.
        in_keys: image entries (``None``: ``"pixels"``).
        out_keys: where the results go (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> img = torch.arange(20.0).reshape(1, 4, 5)
        >>> Crop(2, 3, top=1, left=2)(TensorDict(pixels=img))["pixels"].tolist()
        [[[7.0, 8.0, 9.0], [12.0, 13.0, 14.0]]]
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        top: int = 0,
        left: int = 0,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
    ) -> None:
        super().__init__(in_keys="pixels" if in_keys is None else in_keys, out_keys=out_keys)
        self.w, self.h = int(w), int(h if h else w)
        self.top, self.left = int(top), int(left)

    def _window(self, rows: int, cols: int) -> tuple[int, int]:
        return self.top, self.left

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        _check_image(f"{type(self).__name__}._apply_transform", value, want="[..., H, W]")
        rows, cols = value.shape[-2:]
        top, left = self._window(rows, cols)
        if top < 0 or left < 0 or top + self.w > rows or left + self.h > cols:
            raise ValueError(
                f"{type(self).__name__}._apply_transform: the window does not fit the image (got "
                f"image {rows}x{cols}, window {self.w}x{self.h} at ({top}, {left}); expected it "
                "inside). Crop a smaller window."
            )
        return value[..., top : top + self.w, left : left + self.h]

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        shape = torch.Size((*spec.shape[:-2], self.w, self.h))
        self._apply_transform(torch.empty(spec.shape, device="meta"))  # checks the window
        return _same_bounds(spec, shape, spec.dtype or torch.float32)

    def extra_repr(self) -> str:
        return f"w={self.w}, h={self.h}, top={self.top}, left={self.left}"


class CenterCrop(Crop):
    """Keeps the centred ``w`` x ``h`` window of ``[..., H, W]`` images (``w`` rows, TorchRL).

    The window starts at ``round((H - w) / 2)``, ``round((W - h) / 2)``, as torchvision's
    ``center_crop`` (which TorchRL calls) places it; it must lie inside the image.

    Args:
        w: rows kept.
        h: columns kept (default ``w``).
        in_keys: image entries (``None``: ``"pixels"``).
        out_keys: where the results go (default: in place).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> img = torch.arange(20.0).reshape(1, 4, 5)
        >>> CenterCrop(2, 3)(TensorDict(pixels=img))["pixels"].tolist()
        [[[6.0, 7.0, 8.0], [11.0, 12.0, 13.0]]]
    """

    def __init__(
        self,
        w: int,
        h: int | None = None,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
    ) -> None:
        super().__init__(w, h, 0, 0, in_keys, out_keys)

    def _window(self, rows: int, cols: int) -> tuple[int, int]:
        return round((rows - self.w) / 2.0), round((cols - self.h) / 2.0)

    def extra_repr(self) -> str:
        return f"w={self.w}, h={self.h}"
