"""AdditiveGaussianModule: add annealed Gaussian noise to the action, then project it."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.envs.core._exploration_type import ExplorationType, exploration_type
from tdrl.modules.exploration._utils import (
    DeviceLike,
    action_spec,
    anneal,
    check_positive,
    decreasing,
)
from tdrl.specs import TensorSpec

__all__ = ["AdditiveGaussianModule"]


class AdditiveGaussianModule(TensorDictModuleBase):
    """Adds ``sigma * N(mean, std)`` noise to the action and projects it into the spec.

    Only under ``ExplorationType.RANDOM``; other types return the input unchanged. ``sigma``
    goes linearly from ``sigma_init`` to ``sigma_end`` over ``annealing_num_steps`` frames of
    :meth:`step`.

    Args:
        spec: the action spec (a leaf, or a Composite holding ``action_key``); the noisy action
            is mapped back into it with ``spec.project`` (a clamp for ``Bounded``). May be
            ``None`` and set later through the ``spec`` property.
        sigma_init: initial noise scale.
        sigma_end: final noise scale.
        annealing_num_steps: frames to go from ``sigma_init`` to ``sigma_end``.
        mean: mean of the base noise.
        std: standard deviation of the base noise.
        action_key: the action entry to modify.
        safe: accepted for TorchRL code; the noisy action is always projected into the spec.
        device: where the ``sigma`` buffer and the spec live.

    Raises:
        ValueError: ``annealing_num_steps <= 0`` or ``sigma_end > sigma_init``.
        RuntimeError: a call before the spec is set.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded
        >>> module = AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=10.0)
        >>> td = module(TensorDict(action=torch.zeros(5, 2), batch_size=[5]))
        >>> bool(td["action"].abs().max() <= 1.0), bool((td["action"] != 0).any())
        (True, True)
    """

    sigma: torch.Tensor

    def __init__(
        self,
        spec: TensorSpec | None = None,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        *,
        action_key: NestedKey = "action",
        safe: bool = False,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        where = "AdditiveGaussianModule.__init__"
        check_positive(annealing_num_steps, "annealing_num_steps", where)
        decreasing(sigma_init, sigma_end, ("sigma_init", "sigma_end"), where)
        self.action_key = action_key
        self._device = device
        self._spec: TensorSpec | None = None
        self._leaf: TensorSpec | None = None
        if spec is not None:
            self.spec = spec
        self.sigma_init, self.sigma_end = float(sigma_init), float(sigma_end)
        self.annealing_num_steps = annealing_num_steps
        self.mean, self.std = float(mean), float(std)
        self.safe = safe
        self.register_buffer("sigma", torch.tensor(float(sigma_init), device=device))
        self.in_keys = [action_key]
        self.out_keys = [action_key]

    @property
    def spec(self) -> TensorSpec | None:
        """The action spec (``None`` until set, for a spec known only later)."""
        return self._spec

    @spec.setter
    def spec(self, value: TensorSpec) -> None:
        if self._device is not None:
            value = value.to(self._device)
        self._leaf = action_spec(value, self.action_key, "AdditiveGaussianModule.spec")
        self._spec = value

    def step(self, frames: int = 1) -> None:
        """Anneals ``sigma`` by ``frames`` frames."""
        anneal(self.sigma, self.sigma_init, self.sigma_end, self.annealing_num_steps, frames)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Adds the noise and projects (RANDOM only)."""
        if exploration_type() is not ExplorationType.RANDOM:
            return tensordict
        if self._leaf is None:
            raise RuntimeError(
                "AdditiveGaussianModule.forward: the spec is not set (got spec=None; expected an"
                " action spec). Pass spec= or set module.spec before the first call."
            )
        action = tensordict.get(self.action_key)
        noise = torch.randn_like(action).mul_(self.std).add_(self.mean)
        tensordict.set(self.action_key, self._leaf.project(action + self.sigma * noise))
        return tensordict
