"""IQLLoss and DiscreteIQLLoss: implicit Q-learning (Kostrikov et al., 2021)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._actor_plan import policy_dist_acted
from tdrl.objectives._base import LossModule
from tdrl.objectives._ensemble import QEnsemble, ensemble_distance, ensemble_target
from tdrl.objectives._sac import QNetworks
from tdrl.objectives._utils import (
    batch_mean,
    call_with_params,
    check_loss_function,
    gather_action_value,
    get_entry,
    plain_layers,
    resolve_action_space,
    unsqueeze_like,
    value_target,
)
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import TensorSpec

__all__ = ["DiscreteIQLLoss", "IQLLoss"]


class IQLLoss(LossModule):
    """Implicit Q-learning: expectile value regression and advantage-weighted regression.

    Three networks: ``actor_network`` (probabilistic, ``get_dist``), ``qvalue_network``
    (observation and action to ``"state_action_value"``, copied into a
    :class:`~tdrl.objectives.QEnsemble` of ``num_qvalue_nets`` critics) and the separate
    ``value_network`` (observation to ``"state_value"``). Only data actions are evaluated:
    no action outside the data is ever queried, which suits offline RL.

    - ``loss_value``: expectile regression of ``V(s)`` on ``min_i Q'_i(s, a)`` (target
      critics): ``|expectile - 1(u < 0)| * u^2`` with ``u = Q' - V``.
    - ``loss_qvalue``: each critic regresses on ``r + gamma * V(s')`` (TD(0) by default;
      terminated steps do not bootstrap, truncated ones do).
    - ``loss_actor``: ``-exp(temperature * (Q' - V)) * log pi(a|s)`` (weights clipped at 100
      and detached).

    Diagnostics: ``"entropy"`` (the mean ``-log pi(a|s)`` of the batch's actions), as TorchRL.
    The per-sample ``"td_error"`` (the largest squared critic error, shape
    ``batch.batch_size``) is written into the batch as TorchRL does (and is in
    :meth:`qvalue_loss`'s metadata).

    Args:
        actor_network: the stochastic policy.
        qvalue_network: the critic (or a list of critics of one architecture).
        value_network: the state-value network (third positional argument, as in TorchRL).
        num_qvalue_nets: the number of critics.
        loss_function: the critics' distance: ``"smooth_l1"`` (default, as TorchRL),
            ``"l2"`` (the squared error) or ``"l1"``.
        temperature: the inverse temperature of the advantage weights (TorchRL's 1.0).
        expectile: the expectile of the value regression, in ``(0, 1)`` (TorchRL's 0.5).
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        priority_key: the output key of the TD error (default ``"td_error"``).
        separate_losses, deactivate_vmap, scalar_output_mode: TorchRL's; only their defaults
            are accepted.
        reduction: only ``None``/``"mean"``.
        delay_qvalue: use target critics (updated by ``SoftUpdate``) in the value and actor
            losses (tdrl only; TorchRL always does).

    Examples:
        >>> from tdrl.testing import (make_qvalue_critic, make_state_value_net,
        ...     make_tanh_normal_actor, make_transition_batch)
        >>> loss = IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), make_state_value_net())
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]).backward()
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: action, critics' and value network's outputs, reward and flags.

        ``log_prob`` is TorchRL's key of the policy log-prob its ``actor_loss`` stores in the
        batch (for the ``"entropy"`` diagnostic); tdrl's losses write only ``"td_error"`` into
        the batch and compute the entropy directly, so the key is accepted, nothing is stored.
        """

        action: NestedKey = "action"
        state_action_value: NestedKey = "state_action_value"
        value: NestedKey = "state_value"
        log_prob: NestedKey = "_log_prob"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"

    default_value_estimator = ValueEstimators.TD0
    _mask_qvalue = False  # see _qvalue_terms

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        value_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        gamma: float | None = None,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: str | None = None,
        delay_qvalue: bool = True,
    ) -> None:
        super().__init__()
        where = f"{type(self).__name__}.__init__"
        self._torchrl_options(
            gamma=gamma,
            priority_key=priority_key,
            reduction=reduction,
            separate_losses=(separate_losses, False),
            deactivate_vmap=(deactivate_vmap, False),
            scalar_output_mode=(scalar_output_mode, None),
        )
        self.loss_function = check_loss_function(loss_function, where)
        if not 0.0 < expectile < 1.0:
            raise ValueError(f"{where}: expectile must be in (0, 1) (got {expectile}).")
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{where}: actor_network has no get_dist (got {type(actor_network).__name__}; "
                "expected a ProbabilisticActor or a ProbabilisticTensorDictSequential)."
            )
        self.actor_network = actor_network
        self.qvalue_network = QEnsemble(qvalue_network, num_qvalue_nets)
        self.value_network = value_network
        self._value_layers = plain_layers(value_network)
        self.expectile = expectile
        self.temperature = temperature
        if delay_qvalue:
            self._make_target("qvalue_network")

    def _q_taken(self, td: TensorDictBase, params: TensorDictBase | None) -> Tensor:
        """The critics' values of the data action, ``[num_qvalue_nets, *B, 1]``."""
        return self.qvalue_network(td, params, out_key=self.tensor_keys.state_action_value)

    def _value(self, td: TensorDictBase) -> Tensor:
        where = f"{type(self).__name__}.forward"
        key = self.tensor_keys.value
        return call_with_params(self.value_network, self._value_layers, td, None, key, where)

    # ---------------------------------------------------------------- pieces
    @torch.no_grad()
    def _q_target(self, td: TensorDictBase) -> Tensor:
        """``min_i Q'_i(s, a_data)`` with the target critics (no gradient)."""
        return self._q_taken(td, ensemble_target(self)).amin(0)

    def _value_terms(self, td: TensorDictBase, q_target: Tensor) -> tuple[Tensor, Tensor]:
        """``(loss_value, V(s))``: the expectile regression of ``V(s)`` on ``q_target``."""
        value = self._value(td)
        gap = q_target - value
        weight = torch.abs(self.expectile - (gap.detach() < 0).to(gap.dtype))
        return batch_mean(weight * gap.square(), td, None, self), value

    def _qvalue_terms(
        self, td: TensorDictBase, value: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(loss_qvalue, td_error, pred, target)``: the critics on ``r + gamma * V(s')``."""
        where = f"{type(self).__name__}.forward"
        pred = self._q_taken(td, None)
        with torch.no_grad():
            next_value = self._value(get_entry(td, "next", where))
        target = value_target(self, td, value.detach(), next_value, where)
        # TorchRL 0.14.1's IQLLoss.qvalue_loss selects the inputs it needs before its
        # reduction, which drops the validity masks: its loss_qvalue is never masked
        # (DiscreteIQLLoss's is).
        owner = self if self._mask_qvalue else None
        loss_qvalue, td_error = ensemble_distance(pred, target, self.loss_function, td, owner=owner)
        return loss_qvalue, td_error, pred, target

    def _actor_terms(
        self, td: TensorDictBase, q_target: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``(loss_actor, log pi(a_data|s))``: advantage-weighted regression on the data."""
        where = f"{type(self).__name__}.forward"
        dist = policy_dist_acted(self.actor_network, td)[0]
        log_prob = dist.log_prob(get_entry(td, self.tensor_keys.action, where))
        advantage = (q_target - value.detach()).squeeze(-1)
        log_prob = unsqueeze_like(log_prob, advantage)
        weights = torch.exp(self.temperature * advantage).clamp(max=100.0)
        return -batch_mean(weights * log_prob, td, None, self), log_prob

    # ---------------------------------------------------------------- TorchRL's per-part losses
    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss, as TorchRL's ``actor_loss``: ``-E[exp(beta * A) log pi(a|s)]``.

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_actor, {})``, the loss averaged over the batch.

        Examples:
            >>> from tdrl.testing import (make_qvalue_critic, make_state_value_net,
            ...     make_tanh_normal_actor, make_transition_batch)
            >>> loss = IQLLoss(make_tanh_normal_actor(), make_qvalue_critic(),
            ...                make_state_value_net())
            >>> batch = make_transition_batch(batch=(4,))
            >>> [part(batch)[0].shape for part in (loss.actor_loss, loss.qvalue_loss,
            ...                                    loss.value_loss)]
            [torch.Size([]), torch.Size([]), torch.Size([])]
        """
        with torch.no_grad():
            value = self._value(tensordict)
        loss, _ = self._actor_terms(tensordict, self._q_target(tensordict), value)
        return loss, {}

    def value_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The state-value loss, as TorchRL's ``value_loss`` (expectile regression).

        Returns:
            ``(loss_value, {})``, the loss averaged over the batch.
        """
        loss, _ = self._value_terms(tensordict, self._q_target(tensordict))
        return loss, {}

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' loss, as TorchRL's ``qvalue_loss``.

        Returns:
            ``(loss_qvalue, {"td_error": ...})`` with the per-sample TD error ``forward``
            writes (the largest over the critics).
        """
        with torch.no_grad():
            value = self._value(tensordict)
        loss, td_error, _, _ = self._qvalue_terms(tensordict, value)
        return loss, {"td_error": td_error}

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_qvalue``, ``loss_value`` and the diagnostics."""
        q_target = self._q_target(tensordict)
        loss_value, value = self._value_terms(tensordict, q_target)
        loss_qvalue, td_error, _, _ = self._qvalue_terms(tensordict, value)
        loss_actor, log_prob = self._actor_terms(tensordict, q_target, value)
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_value": loss_value,
                "entropy": -log_prob.detach().mean(),
            }
        )
        out.set(self.tensor_keys.priority, td_error)
        return out


class DiscreteIQLLoss(IQLLoss):
    """Implicit Q-learning for discrete actions.

    As :class:`IQLLoss`, with ``qvalue_network`` writing one value per action at
    ``"state_action_value"`` (TorchRL's key for the per-action values; the taken action's
    value is gathered) and a categorical actor.

    Args:
        actor_network: the stochastic policy over the actions.
        qvalue_network: the critic (or a list of critics of one architecture).
        value_network: the state-value network (third positional argument, as in TorchRL).
        num_qvalue_nets: the number of critics.
        loss_function: ``"smooth_l1"`` (default, as TorchRL), ``"l2"`` (the squared error) or ``"l1"``.
        expectile: the expectile of the value regression, in ``(0, 1)``.
        temperature: the inverse temperature of the advantage weights.
        action_space: ``"one_hot"``, ``"categorical"`` or a spec; inferred from the data by
            default.
        delay_qvalue: use target critics in the value and actor losses.

    Examples:
        >>> from tdrl.testing import (make_action_value_net, make_categorical_actor,
        ...     make_state_value_net, make_transition_batch)
        >>> loss = DiscreteIQLLoss(make_categorical_actor(), make_action_value_net(),
        ...                        make_state_value_net()).set_keys(state_action_value="action_value")
        >>> batch = make_transition_batch(batch=(5,), action="one_hot")
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"] + out["loss_value"]).backward()
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: action, critics' and value network's outputs, reward and flags.

        ``log_prob`` is TorchRL's key of the policy log-prob its ``actor_loss`` stores in the
        batch (for the ``"entropy"`` diagnostic); tdrl's losses write only ``"td_error"`` into
        the batch and compute the entropy directly, so the key is accepted, nothing is stored.
        """

        action: NestedKey = "action"
        state_action_value: NestedKey = "state_action_value"  # one value per action
        value: NestedKey = "state_value"
        log_prob: NestedKey = "_log_prob"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"

    _mask_qvalue = True

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        value_network: TensorDictModuleBase,
        *,
        action_space: str | TensorSpec | None = None,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        gamma: float | None = None,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        scalar_output_mode: str | None = None,
        delay_qvalue: bool = True,
    ) -> None:
        super().__init__(
            actor_network,
            qvalue_network,
            value_network,
            num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function,
            temperature=temperature,
            expectile=expectile,
            gamma=gamma,
            priority_key=priority_key,
            separate_losses=separate_losses,
            reduction=reduction,
            scalar_output_mode=scalar_output_mode,
            delay_qvalue=delay_qvalue,
        )
        self.action_space = resolve_action_space(action_space, None, "DiscreteIQLLoss.__init__")

    def _q_taken(self, td: TensorDictBase, params: TensorDictBase | None) -> Tensor:
        keys = self.tensor_keys
        values = self.qvalue_network(td, params, out_key=keys.state_action_value)
        action = get_entry(td, keys.action, "DiscreteIQLLoss.forward")
        return gather_action_value(values, action, self.action_space, lead=1)
