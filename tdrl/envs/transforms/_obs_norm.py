"""ObservationNorm: affine normalisation with fixed (or estimated once) loc and scale."""

from __future__ import annotations

from typing import Any

import torch
from tensordict.utils import NestedKey

from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Bounded, TensorSpec, Unbounded

__all__ = ["ObservationNorm"]


class ObservationNorm(Transform):
    """``(observation - loc) / scale`` with constants given or estimated by :meth:`init_stats`.

    The same ``loc``/``scale`` (broadcast against each entry) apply to every ``in_key``. Bounded
    specs stay bounded (their bounds are normalised); other specs become Unbounded.

    Args:
        loc: the offset (tensor or float); ``None`` until :meth:`init_stats` or a state dict
            sets it.
        scale: the divisor (positive).
        in_keys: entries to normalise.
        out_keys: where the results go (default: in place).
        eps: lower bound of the scale estimated by :meth:`init_stats`.

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=9), ObservationNorm(loc=1.0, scale=2.0,
        ...     out_keys="obs_norm"))
        >>> env.rollout(3)["next", "obs_norm"].flatten().tolist()
        [0.0, 0.5, 1.0]
    """

    def __init__(
        self,
        loc: float | torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
        in_keys: KeysArg = "observation",
        out_keys: KeysArg = None,
        *,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if (loc is None) != (scale is None):
            raise ValueError(
                f"ObservationNorm.__init__: loc and scale go together (got loc={loc}, scale="
                f"{scale}; expected both or neither). Pass both, or neither and call init_stats."
            )
        self.eps = eps
        self.register_buffer("loc", None if loc is None else torch.as_tensor(loc).float())
        self.register_buffer("scale", None if scale is None else torch.as_tensor(scale).float())
        if self.scale is not None and bool((self.scale <= 0).any()):
            raise ValueError(
                f"ObservationNorm.__init__: scale must be positive (got {self.scale.tolist()}; "
                "expected > 0). Pass a positive scale."
            )

    @property
    def initialized(self) -> bool:
        """Whether ``loc`` and ``scale`` are set."""
        return self.loc is not None and self.scale is not None

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        loc, scale = self._buffers["loc"], self._buffers["scale"]  # hot path: no __getattr__
        if loc is None or scale is None:
            raise RuntimeError(
                "ObservationNorm._apply_transform: loc and scale are not set (got None; expected "
                "tensors). Pass loc/scale, call init_stats(num_iter), or load a state dict."
            )
        out = torch.sub(value, loc).div_(scale)
        if value.dtype.is_floating_point and out.dtype != value.dtype:
            out = out.to(value.dtype)
        return out

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        dtype = spec.dtype if spec.dtype is not None and spec.dtype.is_floating_point else None
        dtype = dtype or torch.float32
        if isinstance(spec, Bounded) and self.initialized:
            low = self._apply_transform(spec.low.to(dtype))
            high = self._apply_transform(spec.high.to(dtype))
            return Bounded(low, high, shape=spec.shape, device=spec.device, dtype=dtype)
        return Unbounded(spec.shape, spec.device, dtype=dtype)

    @torch.no_grad()
    def init_stats(self, num_iter: int, *, key: NestedKey | None = None) -> None:
        """Sets ``loc``/``scale`` to the mean/std of ``key`` over a random rollout of the env below.

        The rollout (``num_iter`` steps, partial resets on done) runs the parent env, i.e. the
        base env and the transforms placed before this one. Mean and std are taken over the
        batch and time dims, so each feature (and agent) gets its own constants. The env's
        specs are recomputed afterwards (normalised bounds).

        Args:
            num_iter: number of rollout steps.
            key: the entry to measure (default: the first ``in_key``).

        Raises:
            RuntimeError: the transform is not part of an env.

        Examples:
            >>> from tdrl.envs.transforms import TransformedEnv
            >>> from tdrl.testing import TransformTestEnv
            >>> env = TransformedEnv(TransformTestEnv((8,)), ObservationNorm(out_keys="normed"))
            >>> env.transform[0].init_stats(20)
            >>> td = env.rollout(20, break_when_any_done=False)
            >>> abs(td["normed"].mean().item()) < 1e-4
            True
        """
        parent = self._require_parent("init_stats")
        key = self.in_keys[0] if key is None else key
        data = parent.rollout(num_iter, break_when_any_done=False).get(key)
        data = data.flatten(0, len(parent.batch_size)).double()
        self.loc = data.mean(0).float()
        self.scale = data.std(0).clamp_min(self.eps).float()
        owner = self.container
        if owner is not None:
            owner._rebuild()

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name in ("loc", "scale"):
            if getattr(self, name) is None and prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name]))
        super()._load_from_state_dict(state_dict, prefix, *args)
