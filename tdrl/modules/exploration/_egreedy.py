"""EGreedyModule: replace the action by a random allowed one with probability eps."""

from __future__ import annotations

import copy

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
    unsqueeze_to,
)
from tdrl.specs import TensorSpec

__all__ = ["EGreedyModule"]


class EGreedyModule(TensorDictModuleBase):
    """Epsilon-greedy exploration: with probability ``eps`` the action becomes a random one.

    Put it after a greedy policy (e.g. ``TensorDictSequential(qvalue_actor, egreedy)``). One
    coin is drawn per element of the batch of the tensordict that holds the action (per env, or
    per agent for ``("agents", "action")``). Random actions come from ``spec.rand`` and respect
    the spec's own mask and, with ``action_mask_key``, the mask found in the data (both are
    combined; the spec given is never modified). Only under ``ExplorationType.RANDOM``; other
    exploration types return the input unchanged. :meth:`step` anneals ``eps`` linearly from
    ``eps_init`` to ``eps_end`` over ``annealing_num_steps`` frames.

    Args:
        spec: the action spec (a leaf, or a Composite holding ``action_key``).
        eps_init: initial epsilon, in ``[0, 1]``.
        eps_end: final epsilon, in ``[0, 1]``.
        annealing_num_steps: frames needed to go from ``eps_init`` to ``eps_end``.
        action_key: the action entry to modify.
        action_mask_key: optional boolean mask entry (True = allowed) read from the data.
        device: where the ``eps`` buffer and the spec live.

    Raises:
        ValueError: epsilons outside ``[0, 1]``, ``eps_end > eps_init``, or
            ``annealing_num_steps <= 0``.
        TypeError: ``action_mask_key`` with a spec that has no mask (e.g. ``Bounded``).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.specs import Categorical
        >>> module = EGreedyModule(Categorical(4), eps_init=1.0, action_mask_key="action_mask")
        >>> td = TensorDict(
        ...     action=torch.zeros(3, dtype=torch.int64),
        ...     action_mask=torch.tensor([[False, False, True, False]]).expand(3, 4),
        ...     batch_size=[3],
        ... )
        >>> module(td)["action"].tolist()
        [2, 2, 2]
        >>> module.step(1000); module.eps.item()
        0.1...
    """

    eps: torch.Tensor

    def __init__(
        self,
        spec: TensorSpec,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        *,
        action_key: NestedKey = "action",
        action_mask_key: NestedKey | None = None,
        device: DeviceLike = None,
    ) -> None:
        super().__init__()
        where = "EGreedyModule.__init__"
        for name, value in (("eps_init", eps_init), ("eps_end", eps_end)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"{where}: {name} must be a probability (got {value}; expected a value in"
                    " [0, 1]). Fix the epsilon schedule."
                )
        check_positive(annealing_num_steps, "annealing_num_steps", where)
        decreasing(eps_init, eps_end, ("eps_init", "eps_end"), where)
        if device is not None:
            spec = spec.to(device)
        self.spec = spec
        self._leaf = action_spec(spec, action_key, where)
        if action_mask_key is not None and not hasattr(self._leaf, "update_mask"):
            raise TypeError(
                f"{where}: action_mask_key needs a discrete action spec (got"
                f" {type(self._leaf).__name__}; expected Categorical, OneHot, MultiCategorical"
                " or MultiOneHot). Drop action_mask_key or pass the discrete spec."
            )
        self.eps_init, self.eps_end = float(eps_init), float(eps_end)
        self.annealing_num_steps = annealing_num_steps
        self.action_key = action_key
        self.action_mask_key = action_mask_key
        self.register_buffer("eps", torch.tensor(float(eps_init), device=device))
        self.in_keys = [action_key] + ([action_mask_key] if action_mask_key is not None else [])
        self.out_keys = [action_key]

    def step(self, frames: int = 1) -> None:
        """Anneals ``eps`` by ``frames`` frames (call it once per collected batch)."""
        anneal(self.eps, self.eps_init, self.eps_end, self.annealing_num_steps, frames)

    def _random_action(self, tensordict: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        spec = self._leaf
        lead = action.shape[: action.ndim - spec.ndim]
        if self.action_mask_key is None:
            return spec.rand(lead)
        mask = tensordict.get(self.action_mask_key, None)
        if mask is None:
            raise KeyError(
                f"EGreedyModule.forward: the action mask is missing (got keys"
                f" {sorted(map(str, tensordict.keys(True, True)))}; expected"
                f" {self.action_mask_key!r}). Write the mask in the data or set"
                " action_mask_key=None."
            )
        own = getattr(spec, "mask", None)
        mask = mask.bool() if own is None else mask.bool() & own
        sampler = spec.expand(*lead, *spec.shape) if lead else copy.copy(spec)
        sampler.update_mask(mask)  # type: ignore[attr-defined]
        return sampler.rand()

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Replaces the action by a random allowed one with probability ``eps`` (RANDOM only)."""
        if exploration_type() is not ExplorationType.RANDOM:
            return tensordict
        action = tensordict.get(self.action_key)
        batch = parent_batch(tensordict, self.action_key)
        explore = torch.rand(batch, device=action.device) < self.eps
        random = self._random_action(tensordict, action).to(action.dtype)
        tensordict.set(
            self.action_key, torch.where(unsqueeze_to(explore, action.ndim), random, action)
        )
        return tensordict
