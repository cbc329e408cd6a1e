"""SACLoss: soft actor-critic for continuous actions, with a learned entropy temperature."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, TypeAlias

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

from tdrl.objectives._base import LossModule
from tdrl.objectives._ensemble import QEnsemble, ensemble_distance, ensemble_target
from tdrl.objectives._utils import (
    batch_mean,
    check_loss_function,
    check_prioritized_weights,
    get_entry,
    sample_acted,
    unsqueeze_like,
    value_target,
)
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import Composite, TensorSpec

__all__ = ["SACLoss"]

QNetworks: TypeAlias = TensorDictModuleBase | Sequence[TensorDictModuleBase]


class _EntropyRegularized(LossModule):
    """Shared by the SAC family: ``log_alpha`` (trained or fixed) and its loss."""

    log_alpha: Tensor

    def _init_alpha(
        self,
        alpha_init: float,
        fixed_alpha: bool,
        min_alpha: float | None,
        max_alpha: float | None,
    ) -> None:
        where = f"{type(self).__name__}.__init__"
        if alpha_init <= 0 or (min_alpha or 1.0) <= 0 or (max_alpha or 1.0) <= 0:
            raise ValueError(
                f"{where}: alpha_init, min_alpha and max_alpha must be positive (got "
                f"{alpha_init}, {min_alpha}, {max_alpha})."
            )
        value = torch.tensor(math.log(alpha_init))
        if fixed_alpha:
            self.register_buffer("log_alpha", value)
        else:
            self.log_alpha = nn.Parameter(value)
        self.fixed_alpha = fixed_alpha
        low = -math.inf if min_alpha is None else math.log(min_alpha)
        high = math.inf if max_alpha is None else math.log(max_alpha)
        self._log_alpha_bounds = (low, high)

    def _weight_key(self) -> NestedKey | None:
        """The priority-weight key when this loss weights its terms (TorchRL's SAC and discrete
        SAC weight the critic, actor and temperature losses; its REDQ and CQL do not)."""
        if getattr(self, "_weights_supported", True) and self.use_prioritized_weights:
            return self.tensor_keys.priority_weight
        return None

    def _alpha(self) -> Tensor:
        """The detached temperature; ``log_alpha`` is first projected into its bounds."""
        low, high = self._log_alpha_bounds
        with torch.no_grad():
            if low > -math.inf or high < math.inf:
                self.log_alpha.data.clamp_(low, high)
            return self.log_alpha.exp()

    def _alpha_loss(self, gap: Tensor) -> Tensor:
        """Per element ``-log_alpha * gap``: alpha grows while ``gap`` (the entropy deficit
        ``log pi + target_entropy``) is positive; zeros with ``fixed_alpha``."""
        if self.fixed_alpha:
            return torch.zeros_like(gap)
        return -self.log_alpha * gap.detach()


class SACLoss(_EntropyRegularized):
    """The soft actor-critic loss (Haarnoja et al., 2018) for continuous actions.

    ``actor_network`` is a probabilistic actor (``get_dist``, e.g. a ``ProbabilisticActor``
    with a ``TanhNormal``); ``qvalue_network`` reads the observation and the action and writes
    ``"state_action_value"``; it is copied into a :class:`~tdrl.objectives.QEnsemble` of
    ``num_qvalue_nets`` critics (copy 0 keeps its weights, the others are re-initialised).

    - ``loss_qvalue``: each critic regresses on
      ``r + gamma * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))`` with ``a' ~ pi(s')`` and the
      target critics (TD(0) by default, see :meth:`make_value_estimator`; terminated steps do
      not bootstrap, truncated ones do).
    - ``loss_actor``: ``alpha * log pi(a|s) - min_i Q_i(s, a)`` with ``a ~ pi(s)``
      reparameterised; the critics are evaluated with detached weights (it trains the actor
      only).
    - ``loss_alpha``: ``-log_alpha * (log pi(a|s) + target_entropy)``, zero with
      ``fixed_alpha``.

    Each part is also available alone, as in TorchRL: :meth:`qvalue_v2_loss`,
    :meth:`actor_loss` and :meth:`alpha_loss` (``forward`` computes the same terms).

    Diagnostics (detached): ``"alpha"`` and ``"entropy"`` (``-log pi`` averaged), as TorchRL.
    The per-sample ``"td_error"`` (the largest absolute critic error, shape
    ``batch.batch_size``; CQL: the largest squared error) is written into the batch as TorchRL
    does; :meth:`qvalue_v2_loss`'s metadata holds it with the ``"pred_value"`` and
    ``"target_value"`` means.

    Args:
        actor_network: the stochastic policy.
        qvalue_network: the critic (or a list of critics of one architecture).
        num_qvalue_nets: the number of critics.
        loss_function: ``"smooth_l1"`` (default, as TorchRL), ``"l2"`` (the squared error) or ``"l1"``.
        alpha_init: the initial temperature.
        fixed_alpha: keep the temperature constant (``log_alpha`` is then a buffer).
        target_entropy: a float, or ``"auto"`` for minus the action dimension (from
            ``action_spec``, else the actor's ``spec`` as TorchRL, else the data's action).
        min_alpha: lower bound of the temperature (``log_alpha`` is projected).
        max_alpha: upper bound of the temperature.
        action_spec: the action spec (gives the action dimension for ``"auto"``).
        delay_qvalue: use target critics (updated by ``SoftUpdate``) for the bootstrap.
        value_network: TorchRL's SAC v1 state-value network: only ``None`` is supported.
        delay_actor: only ``False`` (TorchRL's default: the live actor picks next actions).
        delay_value: TorchRL's flag for the v1 value network (no effect without one).
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        priority_key: the output key of the TD error (default ``"td_error"``).
        use_prioritized_weights: ``"auto"``/``True`` weight the Q, actor and alpha losses by the
            batch's ``"priority_weight"`` when present (as TorchRL); ``False`` never.
        reduction: only ``None``/``"mean"``.
        separate_losses, skip_done_states, deactivate_vmap, scalar_output_mode: TorchRL's;
            only their defaults are accepted.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal
        >>> from tdrl.modules import ValueOperator
        >>> net = torch.nn.Sequential(MLP(3, 4, num_cells=8), NormalParamExtractor())
        >>> actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...                            ["loc", "scale"], distribution_class=TanhNormal)
        >>> critic = ValueOperator(MLP(5, 1, num_cells=8), in_keys=["observation", "action"])
        >>> loss = SACLoss(actor, critic)
        >>> batch = TensorDict({
        ...     "observation": torch.randn(4, 3), "action": torch.rand(4, 2),
        ...     "next": {"observation": torch.randn(4, 3), "reward": torch.ones(4, 1),
        ...              "done": torch.zeros(4, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(4, 1, dtype=torch.bool)}}, batch_size=[4])
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        >>> float(out["alpha"])
        1.0
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the action, the critics' output and the transition's reward and flags.

        ``value`` is the value estimator's value key (forwarded to it, as TorchRL).
        ``log_prob`` is TorchRL's key of the actor's log-prob (taken from the actor's
        ``log_prob_keys`` at construction); TorchRL's SAC reads nothing there and neither does
        tdrl's: the loss samples the actions and their log-probs itself.
        """

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        state_action_value: NestedKey = "state_action_value"
        log_prob: NestedKey = "action_log_prob"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = ValueEstimators.TD0
    # TorchRL's SAC weights its Q, actor and alpha losses by the priority weights; REDQ, CQL: no.
    _weights_supported = True
    _members = "sum"
    _squared_error = False  # TorchRL: SAC's priority is |error|, REDQ's and CQL's error ** 2
    _log_prob_from_actor = True  # TorchRL's SACLoss (not CQL/REDQ) takes the actor's log-prob key

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        value_network: TensorDictModuleBase | None = None,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        delay_value: bool = True,
        gamma: float | None = None,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        skip_done_states: bool = False,
        deactivate_vmap: bool = False,
        use_prioritized_weights: str | bool = "auto",
        scalar_output_mode: str | None = None,
    ) -> None:
        super().__init__()
        where = f"{type(self).__name__}.__init__"
        self._torchrl_options(
            gamma=gamma,
            priority_key=priority_key,
            reduction=reduction,
            value_network=(value_network, None),
            delay_actor=(delay_actor, False),
            separate_losses=(separate_losses, False),
            skip_done_states=(skip_done_states, False),
            deactivate_vmap=(deactivate_vmap, False),
            scalar_output_mode=(scalar_output_mode, None),
        )
        self.delay_value = delay_value  # only used by TorchRL's SAC with a value network
        self.use_prioritized_weights = check_prioritized_weights(use_prioritized_weights, where)
        self.loss_function = check_loss_function(loss_function, where)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{where}: actor_network has no get_dist (got {type(actor_network).__name__}; "
                "expected a ProbabilisticActor or a ProbabilisticTensorDictSequential)."
            )
        self.actor_network = actor_network
        log_prob_keys = getattr(actor_network, "log_prob_keys", None)
        if self._log_prob_from_actor and log_prob_keys and len(log_prob_keys) == 1:
            self.set_keys(log_prob=log_prob_keys[0])
        self.qvalue_network = QEnsemble(qvalue_network, num_qvalue_nets)
        self._init_alpha(alpha_init, fixed_alpha, min_alpha, max_alpha)
        if action_spec is None:  # TorchRL reads the actor's spec then
            action_spec = _actor_action_spec(actor_network, self.tensor_keys.action)
        self.target_entropy = _target_entropy(target_entropy, action_spec, where)
        if delay_qvalue:
            self._make_target("qvalue_network")

    # ---------------------------------------------------------------- hooks for REDQ / CQL
    def _target_members(self) -> TensorDictBase:
        """The critics' parameters used for the bootstrap value."""
        return ensemble_target(self)

    def _reduce_actor_q(self, q: Tensor) -> Tensor:
        """Reduces the critics' values of the policy's action over the ensemble dim."""
        return q.amin(0)

    _backup_entropy = True

    # ---------------------------------------------------------------- pieces
    def _entropy_target(self, action: Tensor) -> float:
        if self.target_entropy is None:
            return -float(action.shape[-1])
        return self.target_entropy

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase, alpha: Tensor) -> Tensor:
        keys = self.tensor_keys
        next_td, replace, _, log_prob = sample_acted(self.actor_network, next_td, keys.action)
        q = self.qvalue_network(
            next_td, self._target_members(), out_key=keys.state_action_value, replace=replace
        ).amin(0)
        if not self._backup_entropy:
            return q
        return q - alpha * unsqueeze_like(log_prob, q)

    def _qvalue_loss(self, td: TensorDictBase, alpha: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Returns the Q terms (loss and diagnostics) and the TD error."""
        where = f"{type(self).__name__}.forward"
        pred = self.qvalue_network(td, out_key=self.tensor_keys.state_action_value)
        next_value = self._next_value(get_entry(td, "next", where), alpha)
        target = value_target(self, td, pred[0].detach(), next_value, where)
        loss, td_error = ensemble_distance(
            pred,
            target,
            self.loss_function,
            td,
            self._weight_key(),
            self._members,
            self._squared_error,
            owner=self,
        )
        terms = {
            "loss_qvalue": loss,
            "pred_value": pred.detach().mean(),
            "target_value": target.mean(),
        }
        return terms, td_error

    def _actor_loss(self, td: TensorDictBase, alpha: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Returns ``(loss_actor, log_prob, action)`` for reparameterised policy actions
        (``log_prob`` with the batch's shape, as the actor gives it)."""
        keys = self.tensor_keys
        acted, replace, action, log_prob = sample_acted(self.actor_network, td, keys.action)
        q = self.qvalue_network(
            acted, out_key=keys.state_action_value, detach=True, replace=replace
        )
        q = self._reduce_actor_q(q)
        loss = batch_mean(alpha * unsqueeze_like(log_prob, q) - q, td, self._weight_key(), self)
        return loss, log_prob, action

    # ---------------------------------------------------------------- TorchRL's per-part losses
    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss, as TorchRL's ``SACLoss.actor_loss``.

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_actor, {"log_prob": log pi(a|s)})``: the loss averaged over the batch and
            the (detached) log-probabilities of the reparameterised policy actions, which
            :meth:`alpha_loss` takes.

        Examples:
            >>> from tdrl.testing import (make_qvalue_critic, make_tanh_normal_actor,
            ...     make_transition_batch)
            >>> loss = SACLoss(make_tanh_normal_actor(), make_qvalue_critic(), target_entropy=-2.0)
            >>> loss_actor, meta = loss.actor_loss(make_transition_batch(batch=(4,)))
            >>> loss_actor.shape, meta["log_prob"].shape
            (torch.Size([]), torch.Size([4]))
            >>> loss.alpha_loss(meta["log_prob"]).shape
            torch.Size([4])
        """
        loss, log_prob, _ = self._actor_loss(tensordict, self._alpha())
        return loss, {"log_prob": log_prob.detach()}

    def alpha_loss(self, log_prob: Tensor) -> Tensor:
        """The temperature's loss per element, as TorchRL's ``alpha_loss``.

        Args:
            log_prob: log-probabilities of policy actions (``actor_loss``'s metadata).

        Returns:
            ``-log_alpha * (log_prob + target_entropy)`` per element (``forward`` averages
            it); zeros with ``fixed_alpha``.

        Raises:
            RuntimeError: ``target_entropy="auto"`` without an ``action_spec`` (the action
                size is then read from the data, which ``log_prob`` does not carry).
        """
        if self.target_entropy is None:
            raise RuntimeError(
                f"{type(self).__name__}.alpha_loss: the target entropy is unknown (got "
                "target_entropy='auto' and no action_spec; expected either). Pass "
                "action_spec= or target_entropy= to the loss, or use forward()."
            )
        return self._alpha_loss(log_prob + self.target_entropy)

    def qvalue_v2_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' loss, as TorchRL's ``qvalue_v2_loss`` (SAC without a value network).

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_qvalue, metadata)`` with the per-sample ``"td_error"`` and the detached
            ``"pred_value"``/``"target_value"`` means (and the conservative terms of CQL).
        """
        terms, td_error = self._qvalue_loss(tensordict, self._alpha())
        loss = terms.pop("loss_qvalue")
        return loss, {"td_error": td_error, **terms}

    def qvalue_v1_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """TorchRL's SAC-v1 critic loss (with a state-value network): not supported.

        Raises:
            NotImplementedError: always; tdrl's SAC is v2 (``value_network=None``).
        """
        raise NotImplementedError(
            f"{type(self).__name__}.qvalue_v1_loss: SAC v1 (a state-value network) is not "
            "supported (got a v2 loss; expected value_network=None). Use qvalue_v2_loss."
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and the diagnostics."""
        alpha = self._alpha()
        terms, td_error = self._qvalue_loss(tensordict, alpha)
        loss_actor, log_prob, action = self._actor_loss(tensordict, alpha)
        gap = log_prob + self._entropy_target(action)
        # TorchRL's keys: the loss terms, the temperature and the entropy (the critics'
        # diagnostics stay in qvalue_v2_loss's metadata).
        losses = {k: v for k, v in terms.items() if k.startswith("loss_")}
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                **losses,
                "loss_alpha": batch_mean(
                    self._alpha_loss(gap), tensordict, self._weight_key(), self
                ),
                "alpha": alpha,
                "entropy": -log_prob.detach().mean(),
            }
        )
        out.set(self.tensor_keys.priority, td_error)
        return out


def _actor_action_spec(actor: Any, key: NestedKey) -> TensorSpec | None:
    """The action leaf of ``actor.spec`` (a ``ProbabilisticActor``'s), if it has one."""
    spec = getattr(actor, "spec", None)
    if isinstance(spec, Composite):
        leaf = spec.get(key, None) if key in spec.keys(True, True) else None
        return leaf if isinstance(leaf, TensorSpec) else None
    return spec if isinstance(spec, TensorSpec) else None


def _target_entropy(value: float | str, spec: TensorSpec | None, where: str) -> float | None:
    """A float, or None for "minus the action dimension of the data"."""
    if value != "auto":
        if isinstance(value, str):
            raise ValueError(f"{where}: target_entropy must be a float or 'auto' (got {value!r}).")
        return float(value)
    if spec is None:
        return None
    leaves: list[Any] = list(spec.values(True, True)) if isinstance(spec, Composite) else [spec]
    return -float(leaves[0].shape[-1])
