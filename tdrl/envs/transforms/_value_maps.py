"""Element-wise value maps: RewardScaling, RewardClipping, ClipTransform, SignTransform and
BinarizeReward."""

from __future__ import annotations

import torch

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms._base import Transform
from tdrl.envs.transforms._utils import KeysArg
from tdrl.specs import Binary, Bounded, TensorSpec, Unbounded

__all__ = ["BinarizeReward", "ClipTransform", "RewardClipping", "RewardScaling", "SignTransform"]


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
    """``reward * scale + loc``, or ``(reward - loc) / scale`` with ``standard_normal``.

    Args:
        loc: added after scaling (a float or a tensor broadcastable to the reward); with
            ``standard_normal``, subtracted before dividing.
        scale: multiplies the reward (divides it with ``standard_normal``).
        in_keys: rewards to scale (``None``: every reward key of the env).
        out_keys: where the results go (default: in place).
        standard_normal: standardise, ``(reward - loc) / scale``, as TorchRL's flag does.

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
        standard_normal: bool = False,
    ) -> None:
        super().__init__(in_keys, out_keys)
        self.register_buffer("loc", torch.as_tensor(loc, dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(scale, dtype=torch.float32))
        self.standard_normal = bool(standard_normal)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if self.standard_normal:
            return ((value - self.loc) / self.scale).to(value.dtype)
        return (value * self.scale + self.loc).to(value.dtype)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        if isinstance(spec, Bounded) and spec.low.is_floating_point():
            a, b = self._apply_transform(spec.low), self._apply_transform(spec.high)
            low, high = torch.minimum(a, b), torch.maximum(a, b)
            return Bounded(low, high, shape=spec.shape, device=spec.device, dtype=low.dtype)
        return Unbounded(spec.shape, spec.device, dtype=spec.dtype or torch.float32)


class _Clip(Transform):
    def __init__(
        self,
        low: float | None,
        high: float | None,
        in_keys: KeysArg,
        out_keys: KeysArg,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)
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


class ClipTransform(_Clip):
    """Clamps entries to ``[low, high]`` (either bound may be ``None``, not both).

    ``in_keys`` (observations, rewards) are clamped on the way out of the env, with bounded
    specs; ``in_keys_inv`` (actions, states) are clamped before the env below reads them, so
    the user may write any value (their specs are kept).

    Args:
        in_keys: entries to clip as the env returns them.
        out_keys: where the results go (default: in place).
        in_keys_inv: inputs the env reads, clipped before each step.
        out_keys_inv: the names the user writes (default ``in_keys_inv``).
        low: lower bound (keyword-only).
        high: upper bound (keyword-only).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(max_steps=9), ClipTransform("observation", "c", high=2.0))
        >>> env.rollout(4)["next", "c"].flatten().tolist()
        [1.0, 2.0, 2.0, 2.0]
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
        *,
        low: float | None = None,
        high: float | None = None,
    ) -> None:
        if low is None and high is None:
            raise TypeError(
                "ClipTransform.__init__: no bound given (got low=None, high=None; expected at "
                "least one). Pass low=..., high=... or both."
            )
        if in_keys is None and in_keys_inv is None:
            raise ValueError(
                "ClipTransform.__init__: no keys to clip (got in_keys=None, in_keys_inv=None; "
                "expected at least one of them). Pass e.g. in_keys=['observation']."
            )
        super().__init__(low, high, in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.clamp(self.low, self.high)


class SignTransform(Transform):
    """The sign of entries (-1, 0 or 1, same dtype); inputs are replaced by their sign too.

    ``in_keys`` (observations, rewards) get bounded ``[-1, 1]`` specs; ``in_keys_inv``
    (actions, states) are mapped before the env below reads them (their specs are kept).

    Args:
        in_keys: entries mapped as the env returns them.
        out_keys: where the results go (default: in place).
        in_keys_inv: inputs mapped before each step.
        out_keys_inv: the names the user writes (default ``in_keys_inv``).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(), SignTransform("observation", "sign"))
        >>> env.rollout(2)["next", "sign"].flatten().tolist()
        [1.0, 1.0]
    """

    def __init__(
        self,
        in_keys: KeysArg = None,
        out_keys: KeysArg = None,
        in_keys_inv: KeysArg = None,
        out_keys_inv: KeysArg = None,
    ) -> None:
        if in_keys is None and in_keys_inv is None:
            raise ValueError(
                "SignTransform.__init__: no keys to map (got in_keys=None, in_keys_inv=None; "
                "expected at least one of them). Pass e.g. in_keys=['reward']."
            )
        super().__init__(in_keys, out_keys, in_keys_inv, out_keys_inv)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.sign()

    def _inv_apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        return value.sign()

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        dtype = spec.dtype or torch.float32
        return Bounded(-1, 1, shape=spec.shape, device=spec.device, dtype=dtype)


class BinarizeReward(_RewardKeys):
    """``1`` where the reward is positive, ``0`` elsewhere (int8, a Binary spec).

    Args:
        in_keys: rewards to map (``None``: every reward key of the env; ``"reward"`` outside
            envs); their last dim must be 1.
        out_keys: where the results go (default: in place).

    Examples:
        >>> from tdrl.envs.transforms import TransformedEnv
        >>> from tdrl.testing import CountingEnv
        >>> env = TransformedEnv(CountingEnv(), BinarizeReward())
        >>> td = env.rand_step()
        >>> td["next", "reward"].tolist(), env.full_reward_spec["reward"].dtype
        ([1], torch.int8)
    """

    def __init__(self, in_keys: KeysArg = None, out_keys: KeysArg = None) -> None:
        super().__init__(in_keys, out_keys)

    def _apply_transform(self, value: torch.Tensor) -> torch.Tensor:
        if value.ndim == 0 or value.shape[-1] != 1:
            raise ValueError(
                f"BinarizeReward._apply_transform: the reward's last dim must be 1 (got shape "
                f"{tuple(value.shape)}; expected [..., 1]). Unsqueeze the reward first."
            )
        return (value > 0).to(torch.int8)

    def _transform_spec(self, spec: TensorSpec) -> TensorSpec:
        self._apply_transform(torch.empty(spec.shape, device="meta"))  # checks the shape
        return Binary(n=1, shape=spec.shape, device=spec.device)
