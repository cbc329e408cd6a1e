"""Multi-agent GAE: team-shared reward/done flags broadcast along the agents of the values."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase, unravel_key
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives.value import _reference, functional
from tdrl.objectives.value._base import _as_tuple, _standardise
from tdrl.objectives.value._estimators import GAE

__all__ = ["MultiAgentGAE"]


class MultiAgentGAE(GAE):
    """GAE for per-agent values and team-shared (or per-agent) rewards and done flags.

    The critic writes one value per agent (``[*B, T, n_agents, 1]``, e.g. at
    ``("agents", "state_value")``) while a cooperative env returns one reward and one done flag
    for the team (``[*B, T, 1]``). Each of ``("next", reward)``, ``("next", done)`` and
    ``("next", terminated)`` that has one dim fewer than the values gets a new ``agent_dim``
    and is expanded to the values' shape; one with as many dims as the values (per-agent
    rewards of a competitive env) is used as is. ``"advantage"`` and ``"value_target"`` then
    have the values' shape.

    ``average_gae=True`` standardises each agent on its own: mean and unbiased std over every
    dim but ``agent_dim`` (clamped at 1e-4), within each ``group_key`` group when one is set.
    With ``auto_reset_env=True``, ``("next", "truncated")`` is broadcast the same way, and so
    is the discount ``gamma ** steps_to_next_obs`` when the data holds that entry (TorchRL
    0.14.1's MultiAgentGAE raises a shape error there).

    Args:
        agent_dim: the dim of the value tensor that indexes the agents (negative dims count
            from the value's last dim). Default ``-2``, the layout of ``MultiAgentMLP``.
        **kwargs: the options of :class:`GAE` (``gamma``, ``lmbda``, ``average_gae``,
            ``value_network``, ``differentiable``, ``vectorized``, ``auto_reset_env``,
            ``shifted``, ``skip_existing``, ``device``, ``time_dim``, ``deactivate_vmap``,
            ``value_chunk_size``, ``num_chunks``, ``num_chunk``, ``value_chunk_dim``,
            ``group_key``).

    Raises:
        TypeError: ``agent_dim`` is not an int.
        ValueError: (forward) a reward/done tensor has neither the values' number of dims nor
            one fewer.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"agents": {"state_value": torch.zeros(4, 3, 1)}, "next": {
        ...     "reward": torch.ones(4, 1), "done": torch.zeros(4, 1, dtype=torch.bool),
        ...     "agents": {"state_value": torch.zeros(4, 3, 1)}}}, batch_size=[4])
        >>> gae = MultiAgentGAE(gamma=0.5, lmbda=1.0).set_keys(value=("agents", "state_value"))
        >>> adv = gae(td)["advantage"]
        >>> adv.shape, adv[:, 0, 0]
        (torch.Size([4, 3, 1]), tensor([1.8750, 1.7500, 1.5000, 1.0000]))
    """

    def __init__(self, *, agent_dim: int = -2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(agent_dim, bool) or not isinstance(agent_dim, int):
            raise TypeError(
                f"MultiAgentGAE.__init__: agent_dim must be an int (got {agent_dim!r}; expected "
                "the agent dim of the values, e.g. -2 for [*B, T, n_agents, 1])."
            )
        self.agent_dim = agent_dim

    def _signals(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor, Tensor]:
        # The flags are broadcast to the values' shape in _estimate (along agent_dim), not to
        # the reward's as the single-agent estimators do.
        keys = self.tensor_keys
        reward = self._get(tensordict, ("next", *_as_tuple(keys.reward)))
        done = self._get(tensordict, ("next", *_as_tuple(keys.done)))
        terminated = tensordict.get(("next", *_as_tuple(keys.terminated)), None)
        return reward, done, done if terminated is None else terminated

    def _to_agents(self, x: Tensor, value: Tensor, key: NestedKey) -> Tensor:
        """``x`` unchanged when it has the values' dims; else a new agent dim, expanded."""
        if x.ndim == value.ndim:
            return x
        if x.ndim != value.ndim - 1:
            raise ValueError(
                f"MultiAgentGAE.forward: {unravel_key(('next', key))!r} does not fit the values "
                f"(got shape {tuple(x.shape)} for values {tuple(value.shape)}; expected as many "
                "dims as the values (per agent) or one fewer (team-shared)). Store it as "
                "[*B, T, 1] for the team or [*B, T, n_agents, 1] per agent."
            )
        dim = self.agent_dim % value.ndim
        shape = list(x.shape)
        shape.insert(dim, value.shape[dim])
        return x.unsqueeze(dim).expand(shape)

    def _estimate(
        self,
        value: Tensor,
        next_value: Tensor,
        reward: Tensor,
        done: Tensor,
        terminated: Tensor,
        *,
        time_dim: int,
        tensordict: TensorDictBase | None = None,
    ) -> tuple[Tensor, Tensor]:
        keys = self.tensor_keys
        gamma = self._discount(tensordict, reward)
        if isinstance(gamma, Tensor):  # gamma ** steps_to_next_obs, one per reward entry
            gamma = self._to_agents(gamma, value, keys.steps_to_next_obs)
        reward = self._to_agents(reward, value, keys.reward)
        done = self._to_agents(done, value, keys.done)
        terminated = self._to_agents(terminated, value, keys.terminated)
        if self.auto_reset_env:
            # As GAE: a truncated step bootstraps from V(s_t) folded into its reward and every
            # done step ends the recursion; the truncated flag is broadcast like the others.
            if tensordict is None:
                raise ValueError(
                    "MultiAgentGAE: auto_reset_env=True needs the tensordict (got tensors only). "
                    "Call the estimator on the tensordict."
                )
            truncated = self._to_agents(
                self._get(tensordict, ("next", "truncated")), value, "truncated"
            )
            reward = reward + gamma * value * truncated.to(reward.dtype)
            terminated = done
        fn = (
            _reference.generalized_advantage_estimate_loop
            if self.vectorized is False
            else functional.generalized_advantage_estimate
        )
        advantage, target = fn(
            gamma, self.lmbda, value, next_value, reward, done, terminated, time_dim=time_dim
        )
        if self.average_gae:
            advantage = self._per_agent_standardise(advantage, self._groups(tensordict))
        return advantage, target

    def _per_agent_standardise(self, adv: Tensor, groups: Tensor | None) -> Tensor:
        """Zero mean, unit (unbiased) std per agent: over every dim but ``agent_dim``."""
        dim = self.agent_dim % adv.ndim
        if groups is not None:
            # Each (group, agent) pair is a group of its own.
            while groups.ndim < adv.ndim:
                groups = groups.unsqueeze(-1)
            agents = torch.arange(adv.shape[dim], device=adv.device)
            agents = agents.reshape([-1 if d == dim else 1 for d in range(adv.ndim)])
            return _standardise(adv, 1e-4, groups.expand(adv.shape) * adv.shape[dim] + agents)
        dims = [d for d in range(adv.ndim) if d != dim]
        mean = adv.mean(dim=dims, keepdim=True)
        return (adv - mean) / adv.std(dim=dims, keepdim=True).clamp_min(1e-4)
