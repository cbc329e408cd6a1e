"""Multi-agent PPO: MAPPO (centralised critic) and IPPO (one critic per agent's observation)."""

from __future__ import annotations

from typing import Any

from tensordict.nn import TensorDictModule
from torch import Tensor

from tdrl.modules import ValueNorm
from tdrl.objectives._ppo import ClipPPOLoss
from tdrl.objectives.value import ValueEstimators

__all__ = ["IPPOLoss", "MAPPOLoss"]


class MAPPOLoss(ClipPPOLoss):
    """Multi-agent PPO (Yu et al. 2022): decentralised actors, a centralised critic.

    A :class:`ClipPPOLoss` with TorchRL's multi-agent defaults:

    - the value estimator is :class:`~tdrl.objectives.value.MultiAgentGAE`
      (``ValueEstimators.MAGAE``): a team-shared ``("next", "reward")``/``"done"``/
      ``"terminated"`` of shape ``[*B, T, 1]`` is broadcast to every agent of the per-agent
      values ``[*B, T, n_agents, 1]``; per-agent rewards (``set_keys(reward=("agents",
      "reward"))``) are used as they are;
    - ``normalize_advantage=True`` with ``normalize_advantage_exclude_dims=(-2,)``: each
      agent's advantages are standardised on their own;
    - ``entropy_coeff=0.01``;
    - ``value_norm``: a :class:`~tdrl.modules.ValueNorm` (e.g. ``PopArtValueNorm(shape=1)``).
      Each critic-loss computation first updates it with the raw value targets, then computes
      the distance, the value clipping (``clip_value``, whose radius is then in normalised
      units) and the explained variance on the normalised target, prediction and stored value.
      The normaliser is a submodule of the loss (``state_dict``, ``.to()``).

    The critic decides between MAPPO and IPPO: here one that sees the whole team (e.g.
    ``MultiAgentMLP(centralized=True, share_params=True)``) writing ``("agents",
    "state_value")``. Point the loss at the group's keys with ``set_keys(value=("agents",
    "state_value"), action=("agents", "action"))`` (an actor with ``out_keys=[("agents",
    "action")]`` sets ``action`` and ``sample_log_prob`` itself).

    Args:
        actor_network: the per-agent probabilistic policy.
        critic_network: the centralised value module.
        value_norm: normalises the critic's target and prediction (None: off).
        entropy_coeff: weight of the entropy bonus.
        normalize_advantage: standardise the advantages.
        normalize_advantage_exclude_dims: dims kept out of the statistics (the agent dim).
        **kwargs: the options of :class:`ClipPPOLoss` (``clip_epsilon``, ``critic_coeff``,
            ``loss_critic_type``, ``clip_value``, ...).

    Raises:
        TypeError: ``value_norm`` is not a ``ValueNorm``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from tdrl.modules import MultiAgentMLP, PopArtValueNorm
        >>> from tdrl.modules.distributions import IndependentNormal
        >>> n_agents, obs, act = 3, 4, 2
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Sequential(torch.nn.Linear(obs, 2 * act),
        ...         NormalParamExtractor()), [("agents", "observation")],
        ...         [("agents", "loc"), ("agents", "scale")]),
        ...     ProbabilisticTensorDictModule([("agents", "loc"), ("agents", "scale")],
        ...         [("agents", "action")], distribution_class=IndependentNormal,
        ...         return_log_prob=True))
        >>> critic = TensorDictModule(MultiAgentMLP(n_agent_inputs=obs, n_agent_outputs=1,
        ...     n_agents=n_agents, centralized=True, share_params=True),
        ...     [("agents", "observation")], [("agents", "state_value")])
        >>> loss = MAPPOLoss(actor, critic, value_norm=PopArtValueNorm(shape=1))
        >>> _ = loss.set_keys(value=("agents", "state_value"))
        >>> data = TensorDict({"agents": {"observation": torch.randn(8, n_agents, obs)},
        ...     "next": {"agents": {"observation": torch.randn(8, n_agents, obs)},
        ...     "reward": torch.randn(8, 1), "done": torch.zeros(8, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> with torch.no_grad():
        ...     data = actor(data)
        >>> loss.value_estimator(data)["advantage"].shape  # one advantage per agent
        torch.Size([8, 3, 1])
        >>> sorted(loss(data).keys())  # doctest: +NORMALIZE_WHITESPACE
        ['ESS', 'clip_fraction', 'entropy', 'explained_variance', 'kl_approx', 'loss_critic',
         'loss_entropy', 'loss_objective', 'max_ratio', 'mean_ratio']
    """

    default_value_estimator = ValueEstimators.MAGAE

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: TensorDictModule | None = None,
        *,
        value_norm: ValueNorm | None = None,
        entropy_coeff: float = 0.01,
        normalize_advantage: bool = True,
        normalize_advantage_exclude_dims: tuple[int, ...] = (-2,),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            actor_network,
            critic_network,
            entropy_coeff=entropy_coeff,
            normalize_advantage=normalize_advantage,
            normalize_advantage_exclude_dims=normalize_advantage_exclude_dims,
            **kwargs,
        )
        if value_norm is not None and not isinstance(value_norm, ValueNorm):
            raise TypeError(
                f"{type(self).__name__}.__init__: value_norm is not a value normaliser (got "
                f"{type(value_norm).__name__}; expected a tdrl.modules.ValueNorm or None). Pass "
                "e.g. value_norm=PopArtValueNorm(shape=1)."
            )
        self.value_norm = value_norm

    def _critic_loss_inputs(
        self, target: Tensor, value: Tensor, old: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        norm = self.value_norm
        if norm is None:
            return target, value, old
        # PopArt: the statistics follow the raw returns; the loss lives in normalised units.
        norm.update(target)
        return (
            norm.normalize(target.detach()),
            norm.normalize(value),
            None if old is None else norm.normalize(old),
        )


class IPPOLoss(MAPPOLoss):
    """Independent PPO (de Witt et al. 2020): each agent's critic sees its own observation.

    The same loss as :class:`MAPPOLoss` (same defaults and options); only the critic differs:
    a decentralised one, e.g. ``MultiAgentMLP(centralized=False, share_params=True)``.

    Args:
        actor_network: the per-agent probabilistic policy.
        critic_network: the per-agent value module.
        value_norm: normalises the critic's target and prediction (None: off).
        entropy_coeff: weight of the entropy bonus.
        normalize_advantage: standardise the advantages.
        normalize_advantage_exclude_dims: dims kept out of the statistics (the agent dim).
        **kwargs: the options of :class:`ClipPPOLoss`.

    Examples:
        >>> import torch
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from tdrl.modules import MultiAgentMLP
        >>> from tdrl.modules.distributions import IndependentNormal
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Sequential(torch.nn.Linear(4, 4),
        ...         NormalParamExtractor()), [("agents", "observation")],
        ...         [("agents", "loc"), ("agents", "scale")]),
        ...     ProbabilisticTensorDictModule([("agents", "loc"), ("agents", "scale")],
        ...         [("agents", "action")], distribution_class=IndependentNormal))
        >>> critic = TensorDictModule(MultiAgentMLP(n_agent_inputs=4, n_agent_outputs=1,
        ...     n_agents=3, centralized=False, share_params=True),
        ...     [("agents", "observation")], [("agents", "state_value")])
        >>> loss = IPPOLoss(actor, critic)
        >>> loss.normalize_advantage, loss.normalize_advantage_exclude_dims, loss.entropy_coeff
        (True, (-2,), 0.01)
    """
