"""OrnsteinUhlenbeckProcessModule: temporally correlated action noise kept in the data."""

from __future__ import annotations

import math

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
    parent_batch,
    sibling,
    unsqueeze_to,
)
from tdrl.specs import TensorSpec

__all__ = ["OrnsteinUhlenbeckProcessModule"]


class OrnsteinUhlenbeckProcessModule(TensorDictModuleBase):
    """Adds Ornstein-Uhlenbeck noise to the action and projects it into the spec.

    The noise follows ``n' = n + theta * (mu - n) * dt + sigma_t * sqrt(dt) * N(0, 1)`` and the
    action becomes ``action + eps * n'``, with ``eps`` annealed from ``eps_init`` to
    ``eps_end`` over ``annealing_num_steps`` frames of :meth:`step` (call it once per collected
    batch, as in TorchRL). The state lives in the data, next to the action:
    ``"_ou_prev_noise"`` (the noise minus ``x0``, same shape as the action) and ``"_ou_steps"``
    (steps since the episode start, shape ``(*batch, 1)``), so it travels with the tensordict
    through ``step_mdp`` and batched envs. Missing state starts from ``x0``; where
    ``is_init_key`` (from ``InitTracker``, shape ``(*batch, 1)``) is true the noise is reset to
    ``x0`` and the step count to 0 before the update. With ``sigma_min`` the scale goes linearly from ``sigma`` to ``sigma_min`` over
    the first ``n_steps_annealing`` steps of each episode. Only under
    ``ExplorationType.RANDOM``; other types return the input unchanged (state untouched).

    Args:
        spec: the action spec (a leaf, or a Composite holding ``action_key``).
        eps_init: initial factor of the noise added to the action.
        eps_end: final factor, at most ``eps_init``.
        annealing_num_steps: frames of :meth:`step` to go from ``eps_init`` to ``eps_end``.
        theta: mean-reversion rate.
        mu: long-run mean of the noise.
        sigma: noise scale.
        dt: time step.
        x0: initial noise value (``None``: 0).
        sigma_min: final scale of the per-episode annealing (``None`` = constant ``sigma``).
        n_steps_annealing: episode steps to go from ``sigma`` to ``sigma_min``.
        action_key: the action entry to modify; the state keys sit next to it.
        is_init_key: the episode-start flag written by ``InitTracker``.
        safe: project the noisy action into the spec (``False`` leaves it unbounded).
        device: where the ``eps`` buffer and the spec live.

    Raises:
        ValueError: ``n_steps_annealing <= 0``, ``annealing_num_steps <= 0`` or
            ``eps_end > eps_init``.

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Bounded
        >>> ou = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)), sigma=1.0)
        >>> td = ou(TensorDict(action=torch.zeros(3, 2), batch_size=[3]))
        >>> td["_ou_prev_noise"].shape, td["_ou_steps"].squeeze(-1).tolist()
        (torch.Size([3, 2]), [1, 1, 1])
    """

    eps: torch.Tensor

    def __init__(
        self,
        spec: TensorSpec,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        theta: float = 0.15,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 1e-2,
        x0: float | torch.Tensor | None = None,
        sigma_min: float | None = None,
        n_steps_annealing: int = 1000,
        *,
        action_key: NestedKey = "action",
        is_init_key: NestedKey = "is_init",
        safe: bool = True,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        where = "OrnsteinUhlenbeckProcessModule.__init__"
        check_positive(n_steps_annealing, "n_steps_annealing", where)
        check_positive(annealing_num_steps, "annealing_num_steps", where)
        decreasing(eps_init, eps_end, ("eps_init", "eps_end"), where)
        if device is not None:
            spec = spec.to(device)
        self.spec = spec
        self._leaf = action_spec(spec, action_key, where)
        self.eps_init, self.eps_end = float(eps_init), float(eps_end)
        self.annealing_num_steps = annealing_num_steps
        self.register_buffer("eps", torch.tensor(float(eps_init), device=device))
        self.theta, self.sigma, self.dt = float(theta), float(sigma), float(dt)
        self.mu = float(mu)
        self.x0: float | torch.Tensor = 0.0 if x0 is None else x0
        self.sigma_min = sigma_min
        self.n_steps_annealing = n_steps_annealing
        self.safe = safe
        self.action_key = action_key
        self.is_init_key = is_init_key
        self.noise_key = sibling(action_key, "_ou_prev_noise")
        self.steps_key = sibling(action_key, "_ou_steps")
        self.in_keys = [action_key, self.noise_key, self.steps_key, is_init_key]
        self.out_keys = [action_key, self.noise_key, self.steps_key]

    def step(self, frames: int = 1) -> None:
        """Anneals ``eps``, the factor of the noise added to the action, by ``frames`` frames."""
        anneal(self.eps, self.eps_init, self.eps_end, self.annealing_num_steps, frames)

    def _scale(self, steps: torch.Tensor, ndim: int) -> torch.Tensor | float:
        if self.sigma_min is None:
            return self.sigma
        frac = (steps.to(torch.float32) / self.n_steps_annealing).clamp(max=1.0)
        sigma = self.sigma + (self.sigma_min - self.sigma) * frac
        return unsqueeze_to(sigma.squeeze(-1), ndim)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Advances the noise of every env, adds it to the action and projects (RANDOM only)."""
        if exploration_type() is not ExplorationType.RANDOM:
            return tensordict
        action = tensordict.get(self.action_key)
        batch = parent_batch(tensordict, self.action_key)
        stored = tensordict.get(self.noise_key, None)
        steps = tensordict.get(self.steps_key, None)
        if stored is None or steps is None:
            stored = torch.zeros_like(action)
            steps = torch.zeros((*batch, 1), dtype=torch.int64, device=action.device)
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is not None:
            reset = is_init.squeeze(-1)
            stored = torch.where(unsqueeze_to(reset, action.ndim), 0.0, stored)
            steps = torch.where(unsqueeze_to(reset, steps.ndim), 0, steps)
        prev = stored + self.x0  # the state is stored relative to x0, as TorchRL does
        sigma = self._scale(steps, action.ndim)
        drift = (self.mu - prev) * (self.theta * self.dt)
        noise = prev + drift + sigma * math.sqrt(self.dt) * torch.randn_like(prev)
        tensordict.set(self.noise_key, noise - self.x0)
        tensordict.set(self.steps_key, steps + 1)
        action = action + self.eps * noise
        tensordict.set(self.action_key, self._leaf.project(action) if self.safe else action)
        return tensordict
