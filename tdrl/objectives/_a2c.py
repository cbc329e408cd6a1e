"""A2C: the advantage actor-critic loss."""

from __future__ import annotations

from tensordict import TensorDictBase
from torch import Tensor, distributions

from tdrl.objectives._policy_gradient import PolicyGradientLoss

__all__ = ["A2CLoss"]


class A2CLoss(PolicyGradientLoss):
    """Advantage actor-critic: ``loss_objective = -E[log pi(a|s) * A]``, plus entropy and critic.

    Advantages come from the batch or, when missing, from the loss's value estimator (GAE by
    default). Arguments are those of :class:`~tdrl.objectives.PPOLoss` (no ratio is needed, so the
    batch does not need the collection log-prob).

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
        >>> batch = TensorDict({"observation": torch.randn(8, 3),
        ...                     "action": torch.eye(2)[torch.randint(2, (8,))],
        ...                     "advantage": torch.randn(8, 1)}, [8])
        >>> A2CLoss(actor)(batch)["loss_objective"].shape
        torch.Size([])
    """

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        return -(log_prob * advantage.detach()).mean(), {}
