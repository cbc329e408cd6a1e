"""REINFORCE: the Monte-Carlo policy gradient, with an optional learned baseline."""

from __future__ import annotations

from tensordict import TensorDictBase
from torch import Tensor, distributions

from tdrl.objectives._policy_gradient import PolicyGradientLoss
from tdrl.objectives.value import ValueEstimators

__all__ = ["ReinforceLoss"]


class ReinforceLoss(PolicyGradientLoss):
    """REINFORCE: ``loss_objective = -E[log pi(a|s) * A]`` with Monte-Carlo advantages.

    The default estimator is TD1 (discounted returns, bootstrapped only at truncations), so
    ``A = G - V(s)`` with a critic as baseline, or ``A = G`` when the batch carries zero values.
    Arguments are those of :class:`~tdrl.objectives.PPOLoss`; the entropy bonus is off by default.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from tdrl.modules.distributions import OneHotCategorical
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     ProbabilisticTensorDictModule(["logits"], ["action"],
        ...                                   distribution_class=OneHotCategorical))
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> batch = TensorDict({"observation": torch.randn(2, 5, 3),
        ...     "action": torch.eye(2)[torch.randint(2, (2, 5))],
        ...     "next": {"observation": torch.randn(2, 5, 3), "reward": torch.ones(2, 5, 1),
        ...              "done": torch.zeros(2, 5, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(2, 5, 1, dtype=torch.bool)}}, [2, 5])
        >>> sorted(ReinforceLoss(actor, critic)(batch).keys())
        ['explained_variance', 'loss_critic', 'loss_objective']
    """

    default_value_estimator = ValueEstimators.TD1

    def __init__(self, *args, entropy_bonus: bool = False, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, entropy_bonus=entropy_bonus, **kwargs)

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        return -(log_prob * advantage.detach()).mean(), {}
