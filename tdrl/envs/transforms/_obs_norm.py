"""ObservationNorm: an affine map with fixed constants, or constants estimated once."""

from __future__ import annotations

from typing import Any

import torch
from tensordict.utils import NestedKey

from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Bounded, TensorSpec, Unbounded

__all__ = ["ObservationNorm"]

Dims = int | tuple[int, ...]


class ObservationNorm(Transform):
    """``obs * scale + loc``, or ``(obs - loc) / scale`` with ``standard_normal=True``.

    The same ``loc``/``scale`` (broadcast against each entry) apply to every ``in_key``. The
    inverse map (``in_keys_inv``) undoes the forward one: what the user writes under
    ``out_keys_inv`` is mapped back before the env below reads it. Bounded specs stay bounded
    (their bounds are mapped); other specs become Unbounded.

    Args:
        loc: the offset (tensor or float); ``None`` until :meth:`init_stats` or a state dict
            sets it.
        scale: the multiplier (``standard_normal=False``) or divisor (``True``). A float scale
            must be positive.
        in_keys: entries to map (``None``: ``"observation"``).
        out_keys: where the results go (default: in place).
        in_keys_inv: inputs the env below reads (mapped back with the inverse formula).
        out_keys_inv: the names the user writes (default ``in_keys_inv``).
        standard_normal: ``True`` for ``(obs - loc) / scale`` (standardisation), ``False``
            for ``obs * scale + loc``.
        eps: lower bound of a float ``scale`` and of the scale estimated by
            :meth:`init_stats` (``None``: the machine epsilon of a floating tensor ``scale``,
            else ``1e-6``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=9), ObservationNorm(loc=1.0, scale=2.0,
        ...     out_keys="obs_norm", standard_normal=True))
        >>> env.rollout(3)["next", "obs_norm"].flatten().tolist()
        [0.0, 0.5, 1.0]
        >>> ObservationNorm(1.0, 2.0)._apply_transform(torch.tensor([3.0])).tolist()
        [7.0]
    """

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
        standard_normal: bool = False,
        eps: float | None = None,
    ) -> None:
        in_keys = "observation" if in_keys is None else in_keys
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
        if (loc is None) != (scale is None):
            raise ValueError(
                f"ObservationNorm.__init__: loc and scale go together (got loc={loc}, scale="
                f"{scale}; expected both or neither). Pass both, or neither and call init_stats."
            )
        # TorchRL keeps the flag as a buffer: state dicts hold "standard_normal", "loc" and
        # "scale" (in that order). The hot path reads a python copy, refreshed on loading.
        self.register_buffer("standard_normal", torch.tensor(bool(standard_normal)))
        self._standard = bool(standard_normal)
        if eps is None:
            floating = isinstance(scale, torch.Tensor) and scale.dtype.is_floating_point
            eps = torch.finfo(scale.dtype).eps if floating else 1e-6  # type: ignore[union-attr]
        self.eps = float(eps)
        if scale is not None and not isinstance(scale, torch.Tensor) and scale <= 0:
            raise ValueError(
                f"ObservationNorm.__init__: a float scale must be positive (got {scale}; "
                "expected > 0). Pass a positive scale, or a tensor for signed multipliers."
            )
        self.register_buffer("loc", None if loc is None else _as_tensor(loc))
        self.register_buffer("scale", None if scale is None else _as_tensor(scale))

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` are set."""
        return self.loc is not None and self.scale is not None

    def _constants(self, method: str) -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale = self._buffers["loc"], self._buffers["scale"]  # hot path: no __getattr__
        if loc is None or scale is None:
            raise RuntimeError(
                f"ObservationNorm.{method}: loc and scale are not set (got None; expected "
                "tensors). Pass loc/scale, call init_stats(num_iter), or load a state dict."
            )
        return loc, scale

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._constants("_apply_transform")
        if self._standard:
            return _same_float(torch.sub(value, loc).div_(scale), value)
        return _same_float(torch.mul(value, scale).add_(loc), value)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._constants("_inv_apply_transform")
        if self._standard:
            return _same_float(torch.mul(value, scale).add_(loc), value)
        return _same_float(torch.sub(value, loc).div_(scale), value)

    def _map_bounds(self, spec: TensorSpec) -> TensorSpec:
        dtype = spec.dtype if spec.dtype is not None and spec.dtype.is_floating_point else None
        dtype = dtype or torch.float32
        if isinstance(spec, Bounded) and self.initialized:
            a = self._apply_transform(spec.low.to(dtype))
            b = self._apply_transform(spec.high.to(dtype))
            low, high = torch.minimum(a, b), torch.maximum(a, b)  # a negative scale swaps them
            return Bounded(low, high, shape=spec.shape, device=spec.device, dtype=dtype)
        return Unbounded(spec.shape, spec.device, dtype=dtype)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        return self._map_bounds(spec)

    def _inv_transform_spec(self, spec: TensorSpec) -> TensorSpec:
        # The user writes forward-mapped values: the outer bounds are the mapped inner ones.
        return self._map_bounds(spec)

    @torch.no_grad()
    def init_stats(
        self,
        num_iter: int,
        reduce_dim: Dims = 0,
        cat_dim: int | None = None,
        key: NestedKey | None = None,
        keep_dims: tuple[int, ...] | None = None,
    ) -> None:
        """Estimates ``loc``/``scale`` from random rollouts of the env below.

        Rollouts of up to ``num_iter`` steps (random actions, stopping at the first done) run
        on the parent env (the base env and the transforms placed before this one) until
        ``num_iter`` frames (batch elements times steps) are collected. The ``key`` entries are
        concatenated along ``cat_dim`` and their mean and std are taken over ``reduce_dim``;
        the reduced dims are dropped, except ``keep_dims`` (kept as singletons). A rollout is
        shaped ``[*batch_size, time, *entry]``: for a batched env reduce over the batch dims
        and time (e.g. ``reduce_dim=(0, 1), cat_dim=1`` for batch size ``(n,)``). With
        ``standard_normal`` the result is ``loc = mean, scale = std``; otherwise
        ``scale = 1 / std`` and ``loc = -mean / std``, so that both formulas standardise.
        The env's specs are recomputed afterwards (mapped bounds).

        Args:
            num_iter: number of frames to collect.
            reduce_dim: dim(s) of the concatenated data to reduce.
            cat_dim: dim along which rollouts are concatenated (default ``reduce_dim``; it
                must be ``reduce_dim`` or one of its dims).
            key: the entry to measure (default: the only ``in_key``).
            keep_dims: reduced dims kept as singletons in ``loc``/``scale``.

        Raises:
            RuntimeError: the transform is not part of an env, is already initialised, has
                several ``in_keys`` and no ``key``, or the statistics are not finite.
            ValueError: ``cat_dim`` or ``keep_dims`` are not among ``reduce_dim``.

        Examples:
            >>> from tdrl.envs.transforms import TransformedEnv
            >>> from tdrl.testing import TransformTestEnv
            >>> env = TransformedEnv(TransformTestEnv((8,)), ObservationNorm(out_keys="normed"))
            >>> env.transform.init_stats(160, reduce_dim=(0, 1), cat_dim=1)
            >>> env.transform.loc.shape
            torch.Size([3])
        """
        reduce, cat_dim = self._check_init_args(reduce_dim, cat_dim, key)
        parent = self._require_parent("init_stats")
        key = self.in_keys[0] if key is None else key
        chunks, frames = [], 0
        while frames < num_iter:
            rollout = parent.rollout(num_iter)
            frames += rollout.numel()
            chunks.append(rollout.get(key))
        data = torch.cat(chunks, cat_dim)
        dims = sorted(d if d < 0 else d - data.ndim for d in reduce)
        keep = [] if keep_dims is None else [d if d < 0 else d - data.ndim for d in keep_dims]
        if any(d not in dims for d in keep):
            raise ValueError(
                f"ObservationNorm.init_stats: keep_dims must be among reduce_dim (got keep_dims="
                f"{keep_dims}, reduce_dim={reduce_dim}). Keep only reduced dims."
            )
        loc = data.mean(dims, keepdim=True)
        scale = data.std(dims, keepdim=True)
        drop = [d for d in dims if d not in keep]
        loc, scale = loc.squeeze(tuple(drop)), scale.squeeze(tuple(drop))
        if not self._standard:
            scale = 1 / scale.clamp_min(self.eps)
            loc = -loc * scale
        if not (torch.isfinite(loc).all() and torch.isfinite(scale).all()):
            raise RuntimeError(
                f"ObservationNorm.init_stats: the statistics of {key!r} are not finite (got loc="
                f"{loc.tolist()}, scale={scale.tolist()}). Check the env's {key!r} values."
            )
        self.loc, self.scale = loc, scale.clamp_min(self.eps)
        owner = self.container
        if owner is not None:
            owner._rebuild()

    def _check_init_args(
        self, reduce_dim: Dims, cat_dim: int | None, key: NestedKey | None
    ) -> tuple[list[int], int]:
        reduce = [reduce_dim] if isinstance(reduce_dim, int) else list(reduce_dim)
        if cat_dim is None:
            if not isinstance(reduce_dim, int):
                raise ValueError(
                    f"ObservationNorm.init_stats: cat_dim is needed when reduce_dim is a tuple "
                    f"(got reduce_dim={reduce_dim}, cat_dim=None). Pass cat_dim=one of them."
                )
            cat_dim = reduce_dim
        if cat_dim not in reduce:
            raise ValueError(
                f"ObservationNorm.init_stats: cat_dim must be in reduce_dim (got cat_dim="
                f"{cat_dim}, reduce_dim={reduce_dim}). Concatenate along a reduced dim."
            )
        if self.initialized:
            raise RuntimeError(
                "ObservationNorm.init_stats: loc and scale are already set (got initialized "
                "constants; expected none). Create a new ObservationNorm to re-estimate them."
            )
        if len(self.in_keys) > 1 and key is None:
            raise RuntimeError(
                f"ObservationNorm.init_stats: which entry to measure is ambiguous (got in_keys="
                f"{self.in_keys} and key=None). Pass key=one of them."
            )
        return reduce, cat_dim

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name in ("loc", "scale"):
            if getattr(self, name) is None and prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(state_dict, prefix, *args)
        self._standard = bool(self._buffers["standard_normal"])

    def extra_repr(self) -> str:
        return f"standard_normal={self._standard}, {super().extra_repr()}"


def _as_tensor(value: float | torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype=torch.get_default_dtype())


def _same_float(out: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Keeps a floating entry's dtype (float64 constants must not widen float32 data)."""
    if value.dtype.is_floating_point and out.dtype != value.dtype:
        return out.to(value.dtype)
    return out
