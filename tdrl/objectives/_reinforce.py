"""REINFORCE: the Monte-Carlo policy gradient, with an optional learned baseline."""

from __future__ import annotations

from tdrl.objectives._policy_gradient import PolicyGradientLoss
from tdrl.objectives.value import ValueEstimators

__all__ = ["ReinforceLoss"]


class ReinforceLoss(PolicyGradientLoss):
    """REINFORCE: ``loss_objective = -E[log pi(a|s) * A]`` with Monte-Carlo advantages.

    The default estimator is TD1 (discounted returns, bootstrapped only at truncations), so
    ``A = G - V(s)`` with a critic as baseline, or ``A = G`` when the batch carries zero values.
    Arguments are those of :class:`~tdrl.objectives.PPOLoss`; the entropy bonus is off by default.

    Examples:
        >>> from tdrl.testing import (make_categorical_actor, make_state_value_net,
        ...     make_transition_batch)
        >>> batch = make_transition_batch(batch=(2, 5), action="one_hot")
        >>> loss = ReinforceLoss(make_categorical_actor(), make_state_value_net())
        >>> sorted(loss(batch).keys())
        ['explained_variance', 'loss_critic', 'loss_objective']
    """

    default_value_estimator = ValueEstimators.TD1

    def __init__(self, *args, entropy_bonus: bool = False, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, entropy_bonus=entropy_bonus, **kwargs)
