"""Element-wise value maps: RewardScaling, RewardClipping and ClipObservation."""

from __future__ import annotations

import torch

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Bounded, TensorSpec, Unbounded

__all__ = ["ClipObservation", "RewardClipping", "RewardScaling"]


class _RewardKeys(Transform):
    """Defaults ``in_keys`` to every reward key of the env below (``"reward"`` outside envs)."""

    def __init__(self, in_keys: KeysArg, out_keys: KeysArg) -> None:
        self._auto = in_keys is None
        # "reward" is TorchRL's default outside an env; an env binds its own reward keys
        super().__init__(in_keys="reward" if in_keys is None else in_keys, out_keys=out_keys)

    def _bind(self, parent: EnvBase) -> None:
        if self._auto:
            self.in_keys = list(parent.reward_keys)
            self.out_keys = list(self.in_keys)


class RewardScaling(_RewardKeys):
    """``reward * scale + loc``.

    Args:
        loc: added after scaling (a float or a tensor broadcastable to the reward).
        scale: multiplies the reward.
        in_keys: rewards to scale (``None``: every reward key of the env).
        out_keys: where the results go (default: in place).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(), RewardScaling(loc=1.0, scale=0.5))
        >>> env.rand_step()["next", "reward"].item()
        1.5
    """

    loc: torch.Tensor
    scale: torch.Tensor

    def __init__(
        self,
        loc: float | torch.Tensor = 0.0,
        scale: float | torch.Tensor = 1.0,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
    ) -> None:
        super().__init__(in_keys, out_keys)
        self.register_buffer("loc", torch.as_tensor(loc, dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32))

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return (value * self.scale + self.loc).to(value.dtype)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        if isinstance(spec, Bounded) and spec.low.is_floating_point():
            a, b = self._apply_transform(spec.low), self._apply_transform(spec.high)
            low, high = torch.minimum(a, b), torch.maximum(a, b)
            return Bounded(low, high, shape=spec.shape, device=spec.device, dtype=low.dtype)
        return Unbounded(spec.shape, spec.device, dtype=spec.dtype or torch.float32)


class _Clip(Transform):
    def __init__(
        self, low: float | None, high: float | None, in_keys: KeysArg, out_keys: KeysArg
    ) -> None:
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        if low is not None and high is not None and low > high:
            raise ValueError(
                f"{type(self).__name__}.__init__: low is above high (got low={low}, high="
                f"{high}; expected low <= high). Swap or fix the bounds."
            )
        self.low = low
        self.high = high

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.clamp(self.low, self.high)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        low = torch.tensor(-float("inf") if self.low is None else self.low, dtype=torch.float64)
        high = torch.tensor(float("inf") if self.high is None else self.high, dtype=torch.float64)
        if isinstance(spec, Bounded):
            low = torch.maximum(spec.low.double(), low)
            high = torch.minimum(spec.high.double(), high)
        if spec.dtype is not None and not spec.dtype.is_floating_point:
            info = torch.iinfo(spec.dtype)  # integer bounds must fit the dtype
            low, high = low.clamp(info.min, info.max), high.clamp(info.min, info.max)
        return Bounded(
            low, high, shape=spec.shape, device=spec.device, dtype=spec.dtype or torch.float32
        )

    def extra_repr(self) -> str:
        return f"low={self.low}, high={self.high}, {super().extra_repr()}"


class RewardClipping(_Clip):
    """Clamps rewards to ``[clamp_min, clamp_max]`` (either bound may be ``None``).

    Args:
        clamp_min: lower bound.
        clamp_max: upper bound.
        in_keys: rewards to clip (``None``: every reward key of the env).
        out_keys: where the results go (default: in place).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(), RewardClipping(-0.5, 0.5))
        >>> env.rand_step()["next", "reward"].item(), env.full_reward_spec["reward"].high.item()
        (0.5, 0.5)
    """

    def __init__(
        self,
        clamp_min: float | None = None,
        clamp_max: float | None = None,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
    ) -> None:
        super().__init__(clamp_min, clamp_max, "reward" if in_keys is None else in_keys, out_keys)
        self._auto = in_keys is None

    def _bind(self, parent: EnvBase) -> None:
        if self._auto:
            self.in_keys = list(parent.reward_keys)
            self.out_keys = list(self.in_keys)


class ClipObservation(_Clip):
    """Clamps observations to ``[low, high]`` (either bound may be ``None``).

    Args:
        low: lower bound.
        high: upper bound.
        in_keys: observations to clip.
        out_keys: where the results go (default: in place).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=9), ClipObservation(high=2.0, out_keys="c"))
        >>> env.rollout(4)["next", "c"].flatten().tolist()
        [1.0, 2.0, 2.0, 2.0]
    """

    def __init__(
        self,
        low: float | None = None,
        high: float | None = None,
        in_keys: KeysArg = "observation",
        out_keys: KeysArg = None,
    ) -> None:
        super().__init__(low, high, in_keys, out_keys)
