"""DiscreteSACLoss: soft actor-critic over a finite action set (Christodoulou, 2019)."""

from __future__ import annotations

import dataclasses
import math

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._ensemble import QEnsemble, ensemble_distance, ensemble_target
from tdrl.objectives._sac import QNetworks, _EntropyRegularized
from tdrl.objectives._utils import (
    check_loss_function,
    gather_action_value,
    get_entry,
    policy_probs,
    resolve_action_space,
    value_target,
)
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import TensorSpec

__all__ = ["DiscreteSACLoss"]


class DiscreteSACLoss(_EntropyRegularized):
    """Soft actor-critic for discrete actions: expectations over the policy replace sampling.

    ``actor_network`` is a probabilistic actor over the actions (``get_dist`` returning a
    categorical or one-hot categorical distribution, masked ones included);
    ``qvalue_network`` reads the observation and writes one value per action at
    ``"action_value"``; it is copied into a :class:`~tdrl.objectives.QEnsemble` of
    ``num_qvalue_nets`` critics (copy 0 keeps its weights, the others are re-initialised).

    - ``loss_qvalue``: each critic's value of the taken action regresses on
      ``r + gamma * sum_a' pi(a'|s') (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``
      (TD(0) by default; terminated steps do not bootstrap, truncated ones do).
    - ``loss_actor``: ``sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a))`` (the critics'
      values are detached).
    - ``loss_alpha``: ``log_alpha * (entropy - target_entropy)``, zero with ``fixed_alpha``.

    Diagnostics (detached): ``"alpha"``, ``"entropy"``, ``"td_error"`` (the largest critic
    error per sample, shape ``batch.batch_size``), ``"pred_value"``, ``"target_value"``.

    Args:
        actor_network: the stochastic policy over ``num_actions`` actions.
        qvalue_network: the critic (or a list of critics of one architecture).
        num_actions: the number of actions (for the ``"auto"`` target entropy).
        num_qvalue_nets: the number of critics.
        loss_function: ``"l2"`` (half the squared error), ``"smooth_l1"`` or ``"l1"``.
        alpha_init: the initial temperature.
        fixed_alpha: keep the temperature constant.
        target_entropy_weight: the ``"auto"`` target entropy is this fraction of the
            maximal entropy ``log(num_actions)``.
        target_entropy: a float, or ``"auto"``.
        action_space: ``"one_hot"``, ``"categorical"`` or a spec; inferred from the data by
            default (see ``DQNLoss``).
        delay_qvalue: use target critics (updated by ``SoftUpdate``) for the bootstrap.

    Examples:
        >>> from tdrl.testing import (make_action_value_net, make_categorical_actor,
        ...     make_transition_batch)
        >>> loss = DiscreteSACLoss(make_categorical_actor(), make_action_value_net(), num_actions=2)
        >>> batch = make_transition_batch(batch=(5,), action="one_hot")
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        >>> round(loss.target_entropy, 4)  # 0.98 * log(2)
        0.6793
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the action, the critics' output and the transition's reward and flags."""

        action: NestedKey = "action"
        action_value: NestedKey = "action_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"

    default_value_estimator = ValueEstimators.TD0

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        *,
        num_actions: int,
        num_qvalue_nets: int = 2,
        loss_function: str = "l2",
        alpha_init: float = 1.0,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: float | str = "auto",
        action_space: str | TensorSpec | None = None,
        delay_qvalue: bool = True,
    ) -> None:
        super().__init__()
        where = "DiscreteSACLoss.__init__"
        self.loss_function = check_loss_function(loss_function, where)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{where}: actor_network has no get_dist (got {type(actor_network).__name__}; "
                "expected a ProbabilisticActor over categorical actions)."
            )
        if num_actions < 1:
            raise ValueError(f"{where}: num_actions must be >= 1 (got {num_actions}).")
        self.actor_network = actor_network
        self.qvalue_network = QEnsemble(qvalue_network, num_qvalue_nets)
        self.action_space = resolve_action_space(action_space, None, where)
        self._init_alpha(alpha_init, fixed_alpha, None, None)
        if target_entropy == "auto":
            target_entropy = target_entropy_weight * math.log(num_actions)
        elif isinstance(target_entropy, str):
            raise ValueError(
                f"{where}: target_entropy must be a float or 'auto' (got {target_entropy!r})."
            )
        self.target_entropy = float(target_entropy)
        if delay_qvalue:
            self._make_target("qvalue_network")

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase, alpha: Tensor) -> Tensor:
        probs, log_probs = policy_probs(self.actor_network, next_td.copy())
        q = self.qvalue_network(
            next_td, ensemble_target(self), out_key=self.tensor_keys.action_value
        ).amin(0)
        return (probs * (q - alpha * log_probs)).sum(-1, keepdim=True)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and the diagnostics."""
        where = "DiscreteSACLoss.forward"
        keys = self.tensor_keys
        alpha = self._alpha()
        values = self.qvalue_network(tensordict, out_key=keys.action_value)
        action = get_entry(tensordict, keys.action, where)
        pred = gather_action_value(values, action, self.action_space, lead=1)
        next_value = self._next_value(get_entry(tensordict, "next", where), alpha)
        target = value_target(self, tensordict, pred[0].detach(), next_value, where)
        loss_qvalue, td_error = ensemble_distance(
            pred, target, self.loss_function, tensordict.batch_dims
        )
        probs, log_probs = policy_probs(self.actor_network, tensordict.copy())
        q = values.detach().amin(0)
        loss_actor = (probs * (alpha * log_probs - q)).sum(-1).mean()
        entropy = -(probs * log_probs).sum(-1)
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_alpha": self._alpha_loss(self.target_entropy - entropy),
                "alpha": alpha,
                "entropy": entropy.detach().mean(),
                "pred_value": pred.detach().mean(),
                "target_value": target.mean(),
            }
        )
        out.set(keys.priority, td_error)
        return out
