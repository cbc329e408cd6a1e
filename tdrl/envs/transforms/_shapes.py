"""Shape transforms: UnsqueezeTransform, SqueezeTransform, PermuteTransform, FlattenObservation."""

from __future__ import annotations

import torch

from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Bounded, Categorical, TensorSpec, Unbounded

__all__ = ["FlattenObservation", "PermuteTransform", "SqueezeTransform", "UnsqueezeTransform"]


def _check_negative(name: str, **dims: int) -> None:
    for arg, dim in dims.items():
        if dim >= 0:
            raise ValueError(
                f"{name}.__init__: {arg} must be negative (got {dim}; expected a dim counted from "
                "the end, so that batch dims never move). Use e.g. -1."
            )


class UnsqueezeTransform(Transform):
    """Inserts a size-1 dim at ``dim`` (negative) in each entry; inputs get it removed.

    The inverse keys work the other way: the user writes ``out_keys_inv`` with the extra dim,
    the env below reads ``in_keys_inv`` without it (``squeeze(dim)``).

    Args:
        dim: where the new dim goes, counted from the end (``-1``: last).
        allow_positive_dim: TorchRL's switch for positive dims; accepted with a negative
            ``dim`` (positive dims, which would move the batch dims, raise ``ValueError``).
        in_keys: entries to change (``None``: ``"observation"``).
        out_keys: where the results go (default: in place).
        in_keys_inv: inputs the env below reads without the dim.
        out_keys_inv: the names the user writes (default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv((2,)),
        ...     UnsqueezeTransform(-2, in_keys="observation", in_keys_inv="force"))
        >>> env.full_observation_spec["observation"].shape, env.reset()["observation"].shape
        (torch.Size([2, 1, 3]), torch.Size([2, 1, 3]))
        >>> env.full_action_spec["force"].shape
        torch.Size([2, 1, 1])
    """

    def __init__(
        self,
        dim: int | None = None,
        *,
        allow_positive_dim: bool = False,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        in_keys = "observation" if in_keys is None else in_keys
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        name = type(self).__name__
        if dim is None or (allow_positive_dim and dim >= 0):
            raise ValueError(
                f"{name}.__init__: tdrl needs a negative dim (got dim={dim}, "
                f"allow_positive_dim={allow_positive_dim}; expected a dim counted from the end: "
                "positive dims are not supported, even with allow_positive_dim=True). Count "
                "the dim from the end, e.g. -1."
            )
        _check_negative(name, dim=dim)
        self.allow_positive_dim = bool(allow_positive_dim)
        self.dim = dim

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.unsqueeze(self.dim)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape[self.dim] != 1:
            raise ValueError(
                f"UnsqueezeTransform._inv_call: the input has no size-1 dim {self.dim} (got "
                f"shape {tuple(value.shape)}; expected size 1 there). Write the entry with the "
                "unsqueezed shape of the action spec."
            )
        return value.squeeze(self.dim)

    def _inv_transform_spec(self, spec: TensorSpec) -> TensorSpec:
        return self._transform_spec(spec)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        try:
            return spec.unsqueeze(spec.ndim + 1 + self.dim)
        except (ValueError, IndexError):
            return super()._transform_spec(spec)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, {super().extra_repr()}"


class FlattenObservation(Transform):
    """Flattens the dims ``first_dim`` to ``last_dim`` (both negative) of each entry.

    Args:
        first_dim: first dim to merge, counted from the end.
        last_dim: last dim to merge, counted from the end.
        in_keys: entries to change (``None``: ``"pixels"``, as in TorchRL).
        out_keys: where the results go (default: in place).
        allow_positive_dim: TorchRL's switch for positive dims; accepted with a negative
            ``dim`` (positive dims, which would move the batch dims, raise ``ValueError``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv((2,)), FlattenObservation(-3, -1, "pixels"))
        >>> env.reset()["pixels"].shape, env.full_observation_spec["pixels"].high.shape
        (torch.Size([2, 144]), torch.Size([2, 144]))
    """

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        allow_positive_dim: bool = False,
    ) -> None:
        if allow_positive_dim:
            raise ValueError(
                "FlattenObservation.__init__: positive dims are not supported (got "
                "allow_positive_dim=True; expected False). Count the dims from the end, e.g. -1."
            )
        super().__init__(in_keys="pixels" if in_keys is None else in_keys, out_keys=out_keys)
        _check_negative("FlattenObservation", first_dim=first_dim, last_dim=last_dim)
        if first_dim > last_dim:
            raise ValueError(
                f"FlattenObservation.__init__: first_dim is after last_dim (got {first_dim} and "
                f"{last_dim}; expected first_dim <= last_dim). Swap them."
            )
        self.first_dim = first_dim
        self.last_dim = last_dim

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.flatten(self.first_dim, self.last_dim)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        if isinstance(spec, Bounded):
            low, high = self._apply_transform(spec.low), self._apply_transform(spec.high)
            return Bounded(low, high, shape=low.shape, device=spec.device, dtype=low.dtype)
        shape = self._apply_transform(torch.empty(spec.shape, device="meta")).shape
        if type(spec) is Categorical:
            return Categorical(spec.n, shape, device=spec.device, dtype=spec.dtype or torch.int64)
        return Unbounded(shape, spec.device, dtype=spec.dtype or torch.float32)

    def extra_repr(self) -> str:
        return f"first_dim={self.first_dim}, last_dim={self.last_dim}, {super().extra_repr()}"


class SqueezeTransform(UnsqueezeTransform):
    """Removes the size-1 dim ``dim`` (negative) of each entry; inputs get it back.

    The reverse of :class:`UnsqueezeTransform`: the user writes ``out_keys_inv`` without the
    dim, the env below reads ``in_keys_inv`` with it.

    Args:
        dim: the size-1 dim to remove, counted from the end.
        allow_positive_dim: as in :class:`UnsqueezeTransform` (keyword-only).
        in_keys: entries to change (keyword-only; ``None``: ``"observation"``).
        out_keys: where the results go (default: in place).
        in_keys_inv: inputs the env below reads with the dim.
        out_keys_inv: the names the user writes (default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(batch_size=(2,)),
        ...     SqueezeTransform(-1, in_keys="observation", in_keys_inv="action"))
        >>> env.reset()["observation"].shape, env.full_action_spec["action"].shape
        (torch.Size([2]), torch.Size([2]))
    """

    def __init__(
        self,
        dim: int | None = None,
        *,
        allow_positive_dim: bool = False,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        super().__init__(
            dim,
            allow_positive_dim=allow_positive_dim,
            in_keys=in_keys,
            out_keys=out_keys,
            in_keys_inv=in_keys_inv,
            out_keys_inv=out_keys_inv,
        )

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.ndim < -self.dim or value.shape[self.dim] != 1:
            raise ValueError(
                f"SqueezeTransform._apply_transform: no size-1 dim {self.dim} (got shape "
                f"{tuple(value.shape)}; expected size 1 there). Fix dim or the keys."
            )
        return value.squeeze(self.dim)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.unsqueeze(value.ndim + 1 + self.dim)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        self._apply_transform(torch.empty(spec.shape, device="meta"))  # checks the dim
        try:
            return spec.squeeze(spec.ndim + self.dim)
        except (ValueError, IndexError, AttributeError):
            return Transform._transform_spec(self, spec)

    def _inv_transform_spec(self, spec: TensorSpec) -> TensorSpec:
        return self._transform_spec(spec)


class PermuteTransform(Transform):
    """Permutes the trailing dims of each entry (``dims``: a permutation of ``-n ... -1``).

    The forward map is ``x.permute(*batch_dims, *dims)``; inputs (``in_keys_inv``) get the
    inverse permutation before the env below reads them, and their specs the forward one.

    Args:
        dims: the new order of the last ``len(dims)`` dims, as negative indices.
        in_keys: entries to permute.
        out_keys: where the results go (default: in place).
        in_keys_inv: inputs the env below reads in its own order.
        out_keys_inv: the names the user writes (default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import TransformTestEnv
        >>> env = TransformedEnv(TransformTestEnv(), PermuteTransform([-1, -3, -2], "pixels"))
        >>> env.reset()["pixels"].shape, env.full_observation_spec["pixels"].shape
        (torch.Size([3, 6, 8]), torch.Size([3, 6, 8]))
    """

    def __init__(
        self,
        dims: list[int],
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        dims = [int(d) for d in dims]
        if sorted(dims) != list(range(-len(dims), 0)):
            raise ValueError(
                f"PermuteTransform.__init__: dims must permute the trailing dims (got {dims}; "
                f"expected a permutation of {list(range(-len(dims), 0))}). Use negative dims."
            )
        if in_keys is None and in_keys_inv is None:
            raise ValueError(
                "PermuteTransform.__init__: no keys to permute (got in_keys=None, in_keys_inv="
                "None; expected at least one of them). Pass e.g. in_keys=['pixels']."
            )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        self.dims = dims
        n = len(dims)
        self._inverse = [0] * n
        for j, d in enumerate(dims):
            self._inverse[d + n] = j - n

    def _permute(self, value: torch.Tensor, dims: list[int]) -> torch.Tensor:
        lead = value.ndim - len(dims)
        return value.permute(*range(lead), *(d + value.ndim for d in dims))

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self.dims)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return self._permute(value, self._inverse)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        if isinstance(spec, Bounded):
            low, high = self._apply_transform(spec.low), self._apply_transform(spec.high)
            return Bounded(low, high, shape=low.shape, device=spec.device, dtype=low.dtype)
        shape = self._apply_transform(torch.empty(spec.shape, device="meta")).shape
        return Unbounded(shape, spec.device, dtype=spec.dtype or torch.float32)

    def _inv_transform_spec(self, spec: TensorSpec) -> TensorSpec:
        return self._transform_spec(spec)

    def extra_repr(self) -> str:
        return f"dims={self.dims}, {super().extra_repr()}"
