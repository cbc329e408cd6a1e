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
    batch_mean,
    check_loss_function,
    check_prioritized_weights,
    gather_action_value,
    get_entry,
    policy_probs,
    resolve_action_space,
    value_target,
)
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import Composite, TensorSpec

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

    Diagnostics (detached): ``"alpha"`` and ``"entropy"``, as TorchRL. The per-sample
    ``"td_error"`` (the largest absolute critic error, shape ``batch.batch_size``) is written
    into the batch as TorchRL does (and is in :meth:`qvalue_loss`'s metadata).

    Args:
        actor_network: the stochastic policy over ``num_actions`` actions.
        qvalue_network: the critic (or a list of critics of one architecture).
        num_actions: the number of actions (for the ``"auto"`` target entropy); read from an
            ``action_space`` spec when None.
        num_qvalue_nets: the number of critics.
        loss_function: ``"smooth_l1"`` (default, as TorchRL), ``"l2"`` (the squared error) or ``"l1"``.
        alpha_init: the initial temperature.
        fixed_alpha: keep the temperature constant.
        target_entropy_weight: the ``"auto"`` target entropy is this fraction of the
            maximal entropy ``log(num_actions)``.
        target_entropy: a float, or ``"auto"``.
        action_space: ``"one_hot"``, ``"categorical"`` or a spec; inferred from the data by
            default (see ``DQNLoss``).
        delay_qvalue: use target critics (updated by ``SoftUpdate``) for the bootstrap.
        min_alpha, max_alpha: bounds of the temperature (``log_alpha`` is projected).
        priority_key: the output key of the TD error (default ``"td_error"``).
        use_prioritized_weights: ``"auto"``/``True`` weight the Q, actor and alpha losses by the
            batch's ``"priority_weight"`` when present (as TorchRL); ``False`` never.
        reduction: only ``None``/``"mean"``.
        separate_losses, skip_done_states, deactivate_vmap, scalar_output_mode: TorchRL's;
            only their defaults are accepted.

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
        """Data keys: the action, the critics' output and the transition's reward and flags.

        ``value`` is the value estimator's value key (forwarded to it, as TorchRL). ``log_prob``
        is TorchRL's key name for the policy log-probs; TorchRL's discrete SAC reads and writes
        nothing there (it uses the actor's probabilities), nor does tdrl's.
        """

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        action_value: NestedKey = "action_value"
        log_prob: NestedKey = "log_prob"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = ValueEstimators.TD0

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        *,
        action_space: str | TensorSpec | None = None,
        num_actions: int | None = None,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: float | str = "auto",
        delay_qvalue: bool = True,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        skip_done_states: bool = False,
        deactivate_vmap: bool = False,
        use_prioritized_weights: str | bool = "auto",
        scalar_output_mode: str | None = None,
    ) -> None:
        super().__init__()
        where = "DiscreteSACLoss.__init__"
        self._torchrl_options(
            priority_key=priority_key,
            reduction=reduction,
            separate_losses=(separate_losses, False),
            skip_done_states=(skip_done_states, False),
            deactivate_vmap=(deactivate_vmap, False),
            scalar_output_mode=(scalar_output_mode, None),
        )
        self.use_prioritized_weights = check_prioritized_weights(use_prioritized_weights, where)
        if num_actions is None:
            num_actions = _num_actions(action_space, where)
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
        self._init_alpha(alpha_init, fixed_alpha, min_alpha, max_alpha)
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
        probs, log_probs = policy_probs(self.actor_network, next_td)
        q = self.qvalue_network(
            next_td, ensemble_target(self), out_key=self.tensor_keys.action_value
        ).amin(0)
        return (probs * (q - alpha * log_probs)).sum(-1, keepdim=True)

    def _qvalue_terms(
        self, td: TensorDictBase, alpha: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(loss_qvalue, td_error, all action values, pred, target)`` of the critics."""
        where = "DiscreteSACLoss.forward"
        keys = self.tensor_keys
        values = self.qvalue_network(td, out_key=keys.action_value)
        action = get_entry(td, keys.action, where)
        pred = gather_action_value(values, action, self.action_space, lead=1)
        next_value = self._next_value(get_entry(td, "next", where), alpha)
        target = value_target(self, td, pred[0].detach(), next_value, where)
        loss_qvalue, td_error = ensemble_distance(
            pred, target, self.loss_function, td, self._weight_key(), squared=False, owner=self
        )
        return loss_qvalue, td_error, values, pred, target

    def _actor_terms(self, td: TensorDictBase, q: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """``(loss_actor, E_pi[log pi])`` given the critics' (detached) minimum ``q``."""
        probs, log_probs = policy_probs(self.actor_network, td)
        per_state = (probs * (alpha * log_probs - q)).sum(-1)
        loss_actor = batch_mean(per_state, td, self._weight_key(), self)
        return loss_actor, (probs * log_probs).sum(-1)

    # ---------------------------------------------------------------- TorchRL's per-part losses
    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' loss, as TorchRL's ``DiscreteSACLoss.qvalue_loss``.

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_qvalue, {"td_error": ...})`` with the per-sample TD error (the largest
            absolute error over the critics).

        Examples:
            >>> from tdrl.testing import (make_action_value_net, make_categorical_actor,
            ...     make_transition_batch)
            >>> loss = DiscreteSACLoss(make_categorical_actor(), make_action_value_net(),
            ...                        num_actions=2, action_space="one_hot")
            >>> batch = make_transition_batch(batch=(4,), action="one_hot")
            >>> loss.qvalue_loss(batch)[1]["td_error"].shape
            torch.Size([4])
            >>> loss_actor, meta = loss.actor_loss(batch)
            >>> loss.alpha_loss(meta["log_prob"]).shape
            torch.Size([4])
        """
        loss, td_error, *_ = self._qvalue_terms(tensordict, self._alpha())
        return loss, {"td_error": td_error}

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss ``E_pi[alpha * log pi - min_i Q_i]``, as TorchRL's ``actor_loss``.

        Returns:
            ``(loss_actor, {"log_prob": E_pi[log pi(.|s)]})`` (the expectation per state,
            detached), which :meth:`alpha_loss` takes.
        """
        key = self.tensor_keys.action_value
        with torch.no_grad():
            q = self.qvalue_network(tensordict, out_key=key).amin(0)
        loss, log_prob = self._actor_terms(tensordict, q, self._alpha())
        return loss, {"log_prob": log_prob.detach()}

    def alpha_loss(self, log_prob: Tensor) -> Tensor:
        """The temperature's loss per element, ``-log_alpha * (log_prob + target_entropy)``.

        Args:
            log_prob: ``E_pi[log pi]`` per state (``actor_loss``'s metadata).

        Returns:
            The loss per element (``forward`` averages it); zeros with ``fixed_alpha``.
        """
        return self._alpha_loss(log_prob + self.target_entropy)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and the diagnostics."""
        alpha = self._alpha()
        loss_qvalue, td_error, values, _, _ = self._qvalue_terms(tensordict, alpha)
        loss_actor, log_prob = self._actor_terms(tensordict, values.detach().amin(0), alpha)
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_alpha": batch_mean(
                    self._alpha_loss(log_prob + self.target_entropy),
                    tensordict,
                    self._weight_key(),
                    self,
                ),
                "alpha": alpha,
                "entropy": -log_prob.detach().mean(),
            }
        )
        out.set(self.tensor_keys.priority, td_error)
        return out


def _num_actions(action_space: str | TensorSpec | None, where: str) -> int:
    leaves = (
        []
        if not isinstance(action_space, TensorSpec)
        else (
            list(action_space.values(True, True))
            if isinstance(action_space, Composite)
            else [action_space]
        )
    )
    for leaf in leaves:
        n = getattr(leaf, "n", None)
        if isinstance(n, int):
            return n
    raise ValueError(
        f"{where}: num_actions is missing (got num_actions=None and action_space="
        f"{action_space!r}; expected an int or a OneHot/Categorical spec). Pass num_actions=."
    )
