"""A2C: the advantage actor-critic loss."""

from __future__ import annotations

from tdrl.objectives._policy_gradient import PolicyGradientLoss

__all__ = ["A2CLoss"]


class A2CLoss(PolicyGradientLoss):
    """Advantage actor-critic: ``loss_objective = -E[log pi(a|s) * A]``, plus entropy and critic.

    Advantages come from the batch or, when missing, from the loss's value estimator (GAE by
    default). Arguments are those of :class:`~tdrl.objectives.PPOLoss` (no ratio is needed, so the
    batch does not need the collection log-prob); as in TorchRL, ``"explained_variance"`` is
    not output by default.

    Args:
        actor_network, critic_network, **kwargs: see :class:`~tdrl.objectives.PPOLoss`; its
            ``critic_coeff`` defaults to 1.0 (TorchRL's A2C default) and TorchRL's
            ``advantage_norm``, ``separate_losses`` and ``functional`` are accepted at their
            defaults (``None``, ``False``, ``True``; other values raise).

    Examples:
        >>> import torch
        >>> from tdrl.testing import make_categorical_actor, make_transition_batch
        >>> batch = make_transition_batch(batch=(8,), action="one_hot")
        >>> batch["advantage"] = torch.randn(8, 1)
        >>> A2CLoss(make_categorical_actor())(batch)["loss_objective"].shape
        torch.Size([])
    """

    _log_explained_variance = False
