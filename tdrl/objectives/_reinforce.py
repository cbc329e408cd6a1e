"""REINFORCE: the Monte-Carlo policy gradient, with an optional learned baseline."""

from __future__ import annotations

from typing import Any

from tdrl.objectives._policy_gradient import PolicyGradientLoss
from tdrl.objectives.value import ValueEstimators

__all__ = ["ReinforceLoss"]


class ReinforceLoss(PolicyGradientLoss):
    """REINFORCE: ``loss_actor = -E[log pi(a|s) * A]``, and ``loss_value`` for the baseline.

    As in TorchRL: the outputs are ``"loss_actor"`` and ``"loss_value"`` (the critic's
    distance to ``"value_target"``, when there is a critic), the default value estimator is
    GAE (``make_value_estimator(ValueEstimators.TD1)`` gives Monte-Carlo returns,
    bootstrapped only at truncations) and there is no entropy bonus by default.
    Arguments are those of :class:`~tdrl.objectives.PPOLoss`.

    Args:
        *args: ``actor_network`` and ``critic_network``, as TorchRL.
        entropy_bonus: add an entropy bonus (TorchRL's REINFORCE has none: ``False``).
        **kwargs: the keywords of :class:`~tdrl.objectives.PPOLoss`, including TorchRL's
            ``loss_critic_type`` (default ``"smooth_l1"``), ``clip_value``, ``reduction``
            (``None``/``"mean"``), ``actor``/``critic`` (aliases), ``gamma``, ``advantage_key``,
            ``value_target_key``, and ``delay_value``, ``separate_losses``, ``functional``
            (only at TorchRL's defaults ``False``, ``False``, ``True``; other values raise).

    Examples:
        >>> from tdrl.testing import (make_categorical_actor, make_state_value_net,
        ...     make_transition_batch)
        >>> batch = make_transition_batch(batch=(2, 5), action="one_hot")
        >>> loss = ReinforceLoss(make_categorical_actor(), make_state_value_net())
        >>> sorted(loss(batch).keys())
        ['loss_actor', 'loss_value']
    """

    default_value_estimator = ValueEstimators.GAE
    _objective_key = "loss_actor"
    _critic_key = "loss_value"
    _log_explained_variance = False
    _keys_from_actor = False

    def __init__(self, *args: Any, entropy_bonus: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, entropy_bonus=entropy_bonus, **kwargs)
