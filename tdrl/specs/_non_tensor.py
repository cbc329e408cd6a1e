"""NonTensor: a spec for non-tensor data (strings, objects) stored in a TensorDict."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, is_non_tensor, is_tensor_collection

from tdrl.errors import SpecError
from tdrl.specs._base import TensorSpec, _for_key
from tdrl.specs._utils import DeviceLike, ShapeLike, as_device

__all__ = ["NonTensor"]


class NonTensor(TensorSpec):
    """Non-tensor data: values are ``tensordict.NonTensorData`` holding ``example_data``.

    Args:
        shape: the batch shape of the data (default ``(1,)``, as TorchRL).
        device: the device of the holding TensorDict (may be ``None``).
        dtype: only None.
        example_data: the payload returned by ``rand``/``zero``/``one``.
        batched: only None. feature_dims: only None (TorchRL's batched/feature layouts).

    Examples:
        >>> spec = NonTensor(shape=(2,), example_data="hello")
        >>> value = spec.rand()
        >>> value.data, value.batch_size, spec.is_in(value)
        ('hello', torch.Size([2]), True)
    """

    def __init__(
        self,
        shape: ShapeLike = (1,),
        device: DeviceLike = None,
        dtype: torch.dtype | None = None,
        example_data: Any = None,
        batched: bool | None = None,
        feature_dims: int | None = None,
    ) -> None:
        for name, value in (("dtype", dtype), ("batched", batched), ("feature_dims", feature_dims)):
            if value is not None:
                raise ValueError(
                    f"NonTensor.__init__: {name}={value!r} is not supported (got {value!r}; "
                    "expected None): tdrl's non-tensor specs hold example data only. Drop it."
                )
        super().__init__(shape, as_device(device), None)
        self.example_data = example_data

    @property
    def space(self) -> None:
        """``None``: non-tensor data has no box (as in TorchRL)."""
        return None

    def rand(self, shape: ShapeLike | None = None) -> NonTensorData:
        """A ``NonTensorData`` holding ``example_data`` with batch size ``(*shape, *self.shape)``.

        Examples:
            >>> NonTensor(shape=(), example_data=3).rand((4,)).batch_size
            torch.Size([4])
        """
        full = self._full_shape(shape)
        return NonTensorData(self.example_data, batch_size=full, device=self.device)

    def zero(self, shape: ShapeLike | None = None) -> NonTensorData:
        """Same as :meth:`rand`.

        Examples:
            >>> NonTensor(example_data="x").zero().data
            'x'
        """
        return self.rand(shape)

    def one(self, shape: ShapeLike | None = None) -> NonTensorData:
        """Same as :meth:`rand`.

        Examples:
            >>> NonTensor(example_data="x").one().data
            'x'
        """
        return self.rand(shape)

    def _meta_ok(self, x: Any) -> bool:
        return bool(is_non_tensor(x))

    def _meta_error(self, x: Any, key: Any, where: str) -> str | None:
        if not is_non_tensor(x):
            return (
                f"{where}: value{_for_key(key)} is not non-tensor data (got {type(x).__name__};"
                " expected NonTensorData or NonTensorStack). Wrap it in NonTensorData."
            )
        return None

    def is_in(self, val: Any) -> bool:
        """True for any ``NonTensorData``/``NonTensorStack`` and any raw value that is not a
        tensor or a TensorDict (TorchRL's rule: a string, a number, ``None``, ...).

        Examples:
            >>> NonTensor().is_in(torch.zeros(1)), NonTensor().is_in("text")
            (False, True)
        """
        if not isinstance(val, torch.Tensor) and not is_tensor_collection(val):
            return True
        return bool(is_non_tensor(val))

    def project(self, val: Any) -> Any:
        """Returns ``val`` unchanged.

        Examples:
            >>> NonTensor().project("a")
            'a'
        """
        return val

    def encode(self, val: Any, *, ignore_device: bool = False) -> Any:
        """Wraps ``val`` in a ``NonTensorData`` of the spec shape (non-tensor data passes through).

        Args:
            val: the payload.
            ignore_device: if True, the result has no device (instead of the spec device).

        Examples:
            >>> NonTensor(shape=(2,)).encode("a").batch_size
            torch.Size([2])
        """
        if is_non_tensor(val):
            return val
        device = None if ignore_device else self.device
        return NonTensorData(val, batch_size=self.shape, device=device)

    def to_numpy(self, val: Any, safe: bool | None = None) -> Any:
        """Returns ``val`` unchanged (non-tensor data has no numpy form), checked when ``safe``.

        Examples:
            >>> NonTensor().to_numpy("a")
            'a'
        """
        if safe:
            self.assert_is_in(val)
        return val

    def to(self, dest: DeviceLike | torch.dtype) -> NonTensor:
        """A copy on another device (dtypes do not apply and are refused).

        Examples:
            >>> NonTensor().to("cpu").device
            device(type='cpu')
        """
        if isinstance(dest, torch.dtype):
            raise SpecError(
                f"NonTensor.to: non-tensor data has no dtype (got {dest}; expected a device)."
                " Only move it to a device."
            )
        out = NonTensor(self.shape, None, example_data=self.example_data)
        out.device = as_device(dest)
        return out

    def _eq_extra(self, other: Any) -> bool:
        return True

    def _repr_domain(self) -> list[str]:
        return [f"example_data={self.example_data!r}"]
