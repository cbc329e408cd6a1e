"""CQLLoss: conservative Q-learning on top of SAC, for continuous actions (Kumar et al., 2020)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

from tdrl.objectives._actor_plan import policy_dist_acted
from tdrl.objectives._dqn import DQNLoss
from tdrl.objectives._ensemble import ensemble_distance
from tdrl.objectives._mask import reduce_loss, valid_mask
from tdrl.objectives._sac import QNetworks, SACLoss
from tdrl.objectives._utils import (
    action_bounds,
    batch_mean,
    gather_action_value,
    get_entry,
    sample_unwritten,
    unsqueeze_like,
    value_target,
)
from tdrl.specs import TensorSpec

__all__ = ["CQLLoss", "DiscreteCQLLoss"]


class CQLLoss(SACLoss):
    """CQL(H): SAC whose critics are pushed down on out-of-data actions and up on data ones.

    The actor, temperature and Bellman terms are those of :class:`~tdrl.objectives.SACLoss`,
    with the deterministic backup of the CQL paper (the target is
    ``r + gamma * min_i Q'_i(s', a')`` without the entropy term). The conservative term of
    each critic ``i`` is

    ``temperature * logsumexp_j((Q_i(s, a_j) - log q(a_j)) / temperature) - Q_i(s, a_data)``

    over ``num_random`` uniform actions in the action bounds, ``num_random`` policy actions at
    ``s`` and ``num_random`` policy actions at ``s'`` (each minus its log-density: importance
    sampling), averaged over the batch and scaled by ``min_q_weight``. All these actions and
    the data action go through the critics in one vectorised call.

    With ``with_lagrange`` the term is multiplied by ``alpha_prime = exp(log_alpha_prime)``
    after subtracting ``lagrange_thresh``, and ``loss_alpha_prime`` tunes ``alpha_prime`` so
    that the gap stays near the threshold.

    Output (TorchRL's keys): ``"loss_actor"``, ``"loss_actor_bc"`` (behaviour cloning, see
    :meth:`actor_bc_loss`), ``"loss_qvalue"`` (Bellman), ``"loss_cql"`` (conservative term,
    trains the critics only), ``"loss_alpha"``, ``"loss_alpha_prime"`` (with the lagrange
    option), ``"alpha"`` and ``"entropy"``.

    Args:
        actor_network: the stochastic policy.
        qvalue_network: the critic (or a list of critics of one architecture).
        num_qvalue_nets: the number of critics (keyword; TorchRL's CQL always has two).
        loss_function: ``"smooth_l1"`` (default, as TorchRL), ``"l2"`` (the squared error) or ``"l1"``.
        alpha_init: the initial temperature of the entropy term.
        fixed_alpha: keep the entropy temperature constant.
        target_entropy: a float, or ``"auto"`` for minus the action dimension.
        action_spec: a ``Bounded`` action spec: the box of the random actions (default
            ``[-1, 1]``).
        temperature: the temperature of the logsumexp.
        min_q_weight: the weight of the conservative term.
        num_random: the number of actions of each kind per state.
        with_lagrange: tune the weight of the conservative term (``log_alpha_prime``).
        lagrange_thresh: the target gap of the lagrange option.
        min_alpha, max_alpha, delay_qvalue, gamma, reduction: as in
            :class:`~tdrl.objectives.SACLoss`.
        delay_actor: only ``False`` (TorchRL's default).
        max_q_backup: only ``False`` (TorchRL's default).
        deterministic_backup: ``True`` (default): no entropy term in the target; ``False``
            keeps SAC's ``- alpha * log pi(a'|s')``.
        deactivate_vmap, scalar_output_mode: TorchRL's; only their defaults are accepted.

    Examples:
        >>> from tdrl.testing import (make_qvalue_critic, make_tanh_normal_actor,
        ...     make_transition_batch)
        >>> loss = CQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), with_lagrange=True,
        ...                lagrange_thresh=5.0)
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> sum(v for k, v in out.items() if k.startswith("loss_")).backward()
        >>> sorted(k for k in out.keys() if k.startswith("loss_"))
        ['loss_actor', 'loss_actor_bc', 'loss_alpha', 'loss_alpha_prime', 'loss_cql', 'loss_qvalue']
    """

    @dataclasses.dataclass(frozen=True)
    class Keys(SACLoss.Keys):
        """SAC's keys, and ``log_prob``: the key of the policy log-prob in ``actor_loss``'s
        metadata, which ``alpha_loss`` reads (TorchRL's ``"_log_prob"``).

        ``pred_q1``, ``pred_q2``, ``cql_q1_loss`` and ``cql_q2_loss`` are TorchRL's keys of the
        intermediate entries its ``q_loss`` stores in the batch for ``cql_loss`` to read.
        tdrl's losses write only ``"td_error"`` into the batch and its ``cql_loss`` computes
        what it needs itself, so these keys are accepted (and kept) but nothing is stored there.
        """

        log_prob: NestedKey = "_log_prob"
        pred_q1: NestedKey = "pred_q1"
        pred_q2: NestedKey = "pred_q2"
        cql_q1_loss: NestedKey = "cql_q1_loss"
        cql_q2_loss: NestedKey = "cql_q2_loss"

    _backup_entropy = False
    _weights_supported = False
    _log_prob_from_actor = False  # TorchRL's CQL keeps "_log_prob"
    _squared_error = True
    action_low: Tensor
    action_high: Tensor

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        *,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        gamma: float | None = None,
        temperature: float = 1.0,
        min_q_weight: float = 1.0,
        max_q_backup: bool = False,
        deterministic_backup: bool = True,
        num_random: int = 10,
        with_lagrange: bool = False,
        lagrange_thresh: float = 0.0,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: str | None = None,
        num_qvalue_nets: int = 2,
    ) -> None:
        where = "CQLLoss.__init__"
        if max_q_backup:
            raise ValueError(
                f"{where}: max_q_backup=True is not supported by tdrl (got True; expected "
                "False). Leave max_q_backup at its default."
            )
        super().__init__(
            actor_network,
            qvalue_network,
            num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function,
            alpha_init=alpha_init,
            min_alpha=min_alpha,
            max_alpha=max_alpha,
            action_spec=action_spec,
            fixed_alpha=fixed_alpha,
            target_entropy=target_entropy,
            delay_actor=delay_actor,
            delay_qvalue=delay_qvalue,
            gamma=gamma,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            scalar_output_mode=scalar_output_mode,
        )
        # TorchRL's deterministic_backup=False keeps SAC's entropy term in the target.
        self._backup_entropy = not deterministic_backup
        if temperature <= 0 or num_random < 1:
            raise ValueError(
                f"{where}: temperature must be > 0 and num_random >= 1 (got {temperature}, "
                f"{num_random})."
            )
        bounds = action_bounds(action_spec, None, where) or (torch.tensor(-1.0), torch.tensor(1.0))
        self.register_buffer("action_low", bounds[0])
        self.register_buffer("action_high", bounds[1])
        self.temperature = temperature
        self.min_q_weight = min_q_weight
        self.num_random = num_random
        self.with_lagrange = with_lagrange
        self.lagrange_thresh = lagrange_thresh
        if with_lagrange:
            self.log_alpha_prime = nn.Parameter(torch.zeros(()))

    @torch.no_grad()
    def _proposals(self, td: TensorDictBase, action: Tensor) -> tuple[Tensor, Tensor]:
        """``3 * num_random`` actions per state and their log-densities (uniform, pi(s), pi(s'))."""
        n = self.num_random
        low, high = self.action_low, self.action_high
        uniform = low + (high - low) * torch.rand((n, *action.shape), device=action.device)
        current, current_lp = sample_unwritten(self.actor_network, td, (n,))
        nxt = get_entry(td, "next", "CQLLoss.forward")
        following, following_lp = sample_unwritten(self.actor_network, nxt, (n,))
        log_box = (high - low).log().expand(action.shape[-1:]).sum()
        uniform_lp = torch.full_like(current_lp, 0.0) - log_box
        actions = torch.cat([uniform, current, following], 0)
        return actions, torch.cat([uniform_lp, current_lp, following_lp], 0)

    def _qvalue_loss(self, td: TensorDictBase, alpha: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        where = "CQLLoss.forward"
        keys = self.tensor_keys
        action = get_entry(td, keys.action, where)
        proposals, log_density = self._proposals(td, action)
        actions = torch.cat([proposals, action.unsqueeze(0)], 0)
        # Every proposal and the data action in one call: inputs expanded to [3n + 1, *B].
        inputs = td.select(*self.qvalue_network.in_keys, strict=False)
        inputs = inputs.expand(actions.shape[0], *td.batch_size).clone(False)
        inputs.set(keys.action, actions)
        values = self.qvalue_network(inputs, out_key=keys.state_action_value)
        pred, proposed = values[:, -1], values[:, :-1]

        next_value = self._next_value(get_entry(td, "next", where), alpha)
        target = value_target(self, td, pred[0].detach(), next_value, where)
        loss_qvalue, td_error = ensemble_distance(pred, target, self.loss_function, td, owner=self)

        scores = (proposed - unsqueeze_like(log_density, proposed[0])) / self.temperature
        soft_max = self.temperature * torch.logsumexp(scores, dim=1)
        gap = self.min_q_weight * _per_critic_mean(self, soft_max - pred, td)  # one per critic
        terms = {
            "loss_qvalue": loss_qvalue,
            "pred_value": pred.detach().mean(),
            "target_value": target.mean(),
            "cql_gap": gap.detach().mean(),
        }
        if self.with_lagrange:
            alpha_prime = self.log_alpha_prime.exp().clamp(0.0, 1e6)
            terms["loss_cql"] = (alpha_prime.detach() * (gap - self.lagrange_thresh)).sum()
            shortfall = gap.detach() - self.lagrange_thresh
            terms["loss_alpha_prime"] = -(alpha_prime * shortfall).mean()
            terms["alpha_prime"] = alpha_prime.detach()
        else:
            terms["loss_cql"] = gap.sum()
        return terms, td_error

    # ---------------------------------------------------------------- TorchRL's per-part losses
    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss (SAC's), as TorchRL's ``CQLLoss.actor_loss``.

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_actor, {log_prob_key: log pi(a|s)})`` (detached log-probs of the policy
            actions, at ``tensor_keys.log_prob``), the metadata :meth:`alpha_loss` takes.

        Examples:
            >>> from tdrl.testing import (make_qvalue_critic, make_tanh_normal_actor,
            ...     make_transition_batch)
            >>> loss = CQLLoss(make_tanh_normal_actor(), make_qvalue_critic(), target_entropy=-2.0)
            >>> batch = make_transition_batch(batch=(4,))
            >>> loss_actor, meta = loss.actor_loss(batch)
            >>> loss_alpha, _ = loss.alpha_loss(meta)
            >>> loss_qvalue, q_meta = loss.q_loss(batch)
            >>> loss_cql, _ = loss.cql_loss(batch)
            >>> loss_alpha.shape, q_meta["td_error"].shape, loss_cql.shape
            (torch.Size([]), torch.Size([4]), torch.Size([]))
        """
        loss, log_prob, _ = self._actor_loss(tensordict, self._alpha())
        return loss, {self.tensor_keys.log_prob: log_prob.detach()}

    def alpha_loss(  # type: ignore[override]
        self,
        tensordict: TensorDictBase | Mapping[NestedKey, Tensor],
        mask_tensordict: TensorDictBase | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The temperature's loss, as TorchRL's ``CQLLoss.alpha_loss``.

        Args:
            tensordict: ``actor_loss``'s metadata (or a TensorDict) holding the policy
                log-probs at ``tensor_keys.log_prob``.
            mask_tensordict: the batch whose validity masks (``loss_mask_key``) restrict the
                mean (by default ``tensordict`` when it is a TensorDict, as TorchRL).

        Returns:
            ``(mean(-log_alpha * (log_prob + target_entropy)), {})``; zero with
            ``fixed_alpha``.

        Raises:
            KeyError: the log-probs are missing.
            RuntimeError: the target entropy is unknown (``"auto"`` without ``action_spec``).
        """
        where = "CQLLoss.alpha_loss"
        if mask_tensordict is None and isinstance(tensordict, TensorDictBase):
            mask_tensordict = tensordict
        key = self.tensor_keys.log_prob
        log_prob = tensordict.get(key, None)
        if log_prob is None:
            raise KeyError(
                f"{where}: the log-prob {key!r} is missing (got keys {list(tensordict.keys())}; "
                "expected actor_loss's metadata). Pass the metadata of actor_loss."
            )
        per_element = SACLoss.alpha_loss(self, log_prob)
        if mask_tensordict is None:
            return per_element.mean(), {}
        return reduce_loss(self, per_element, mask_tensordict, where="alpha_loss"), {}

    def q_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' Bellman loss, as TorchRL's ``CQLLoss.q_loss``.

        Returns:
            ``(loss_qvalue, metadata)`` with the per-sample ``"td_error"`` (the largest
            squared error over the critics) and the detached diagnostics.
        """
        terms, td_error = self._qvalue_loss(tensordict, self._alpha())
        loss = terms.pop("loss_qvalue")
        for name in ("loss_cql", "loss_alpha_prime", "alpha_prime"):
            terms.pop(name, None)
        return loss, {"td_error": td_error, **terms}

    def actor_bc_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The behaviour-cloning actor loss, as TorchRL's ``CQLLoss.actor_bc_loss``.

        ``mean(alpha * log pi(a~|s) - log pi(a_data|s))`` with ``a~`` a reparameterised policy
        action and ``a_data`` the batch's action (``alpha`` detached). ``forward`` outputs it
        as ``"loss_actor_bc"``, a diagnostic as in TorchRL (add it to the actor's loss to
        train the actor towards the data, as the CQL paper's warm-up does).

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_actor_bc, {"bc_log_prob": mean log pi(a_data|s)})`` (detached metadata).

        Examples:
            >>> from tdrl.testing import (make_qvalue_critic, make_tanh_normal_actor,
            ...     make_transition_batch)
            >>> loss = CQLLoss(make_tanh_normal_actor(), make_qvalue_critic())
            >>> batch = make_transition_batch(batch=(4,))
            >>> loss_bc, meta = loss.actor_bc_loss(batch)
            >>> loss_bc.shape, sorted(meta)
            (torch.Size([]), ['bc_log_prob'])
        """
        where = "CQLLoss.actor_bc_loss"
        data_action = get_entry(tensordict, self.tensor_keys.action, where)
        dist = policy_dist_acted(self.actor_network, tensordict)[0]
        if hasattr(dist, "rsample_and_log_prob"):
            _, log_prob = dist.rsample_and_log_prob()
        else:
            log_prob = dist.log_prob(dist.rsample())
        bc_log_prob = dist.log_prob(data_action)
        loss = reduce_loss(self, self._alpha() * log_prob - bc_log_prob, tensordict)
        return loss, {"bc_log_prob": bc_log_prob.detach().mean()}

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """SAC's terms with CQL's critics' terms, plus TorchRL's ``"loss_actor_bc"``."""
        out = super().forward(tensordict)
        out.set("loss_actor_bc", self.actor_bc_loss(tensordict)[0])
        return out

    def cql_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The conservative term, as TorchRL's ``CQLLoss.cql_loss``.

        It evaluates the critics on the proposal actions itself (unlike TorchRL's, it does not
        need ``q_loss`` to run first).

        Returns:
            ``(loss_cql, {"cql_gap": ...})``.
        """
        terms, _ = self._qvalue_loss(tensordict, self._alpha())
        return terms["loss_cql"], {"cql_gap": terms["cql_gap"]}


def _per_critic_mean(loss: CQLLoss, values: Tensor, td: TensorDictBase) -> Tensor:
    """The mean of ``values`` (``[critics, *batch, ...]``) over each critic's valid positions
    (the batch's validity masks, ``loss_mask_key``)."""
    mask = valid_mask(loss, td, values[0])
    if mask is None:
        return values.flatten(1).mean(1)
    mask = mask.expand_as(values)
    kept = torch.where(mask, values, torch.zeros_like(values))
    return kept.flatten(1).sum(1) / mask.flatten(1).sum(1).clamp_min(1)


class DiscreteCQLLoss(DQNLoss):
    """CQL for discrete actions: the DQN loss plus ``logsumexp_a Q(s, a) - Q(s, a_data)``.

    Everything of :class:`~tdrl.objectives.DQNLoss` (keys, targets, double DQN, masks,
    estimators, ``"td_error"``) applies; the conservative term ``"loss_cql"`` (scaled by
    ``min_q_weight``) pushes down the values of all actions while keeping the data action's
    up. Actions masked out by the root ``"action_mask"`` (when present) are left out of the
    logsumexp. As TorchRL's, the Bellman term is ``0.5 * distance`` and is output as
    ``"loss_qvalue"`` with ``"pred_value"`` (the mean of every action's value),
    ``"target_value"`` and ``"td_error"`` (the batch mean of the TD error; the batch gets it
    per sample, ``[*batch, 1]``), and priority weights are not used. As TorchRL 0.14.1's, the
    bootstrap ``max_a Q(s', a)`` reads the live network (detached): its ``value_loss`` hands
    the target parameters to the estimator under a keyword the estimator ignores, so the
    target copy that ``delay_value`` keeps (and the updaters move) is never read.

    Args:
        value_network: the Q-network (a tensordict module writing the action values).
        loss_function: ``"l2"`` (the squared error, halved as in TorchRL), ``"smooth_l1"``
            or ``"l1"``.
        delay_value: keep a target copy of the network (moved by ``SoftUpdate``/
            ``HardUpdate``; as in TorchRL the bootstrap does not read it).
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        action_space: ``"one_hot"``, ``"categorical"`` or a spec (see ``DQNLoss``).
        reduction: only ``None``/``"mean"``.
        double_dqn: only ``False``: the bootstrap already reads the live network, so
            Double DQN's selection would change nothing.
        min_q_weight: the weight of the conservative term (tdrl only; TorchRL's is 1).

    Examples:
        >>> from tdrl.testing import make_action_value_net, make_transition_batch
        >>> loss = DiscreteCQLLoss(make_action_value_net(), action_space="categorical")
        >>> batch = make_transition_batch(batch=(8,), action="index")
        >>> out = loss(batch)
        >>> (out["loss_qvalue"] + out["loss_cql"]).backward()
        >>> bool(out["loss_cql"] > 0)  # logsumexp exceeds any single value
        True
    """

    @dataclasses.dataclass(frozen=True)
    class Keys(DQNLoss.Keys):
        """DQN's keys and ``pred_val``: TorchRL's key of the action values its ``value_loss``
        stores in the batch for ``cql_loss`` to read. tdrl's losses write only ``"td_error"``
        into the batch and its ``cql_loss`` evaluates the network itself, so the key is
        accepted (and kept) but nothing is stored there."""

        pred_val: NestedKey = "pred_val"

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        gamma: float | None = None,
        action_space: str | TensorSpec | None = None,
        reduction: str | None = None,
        double_dqn: bool = False,
        min_q_weight: float = 1.0,
    ) -> None:
        if double_dqn:
            raise ValueError(
                "DiscreteCQLLoss.__init__: double_dqn=True is not supported (got True; expected "
                "False). As TorchRL's, the bootstrap reads the live network, so Double DQN's "
                "action selection would change nothing; leave double_dqn at False."
            )
        super().__init__(
            value_network,
            loss_function=loss_function,
            delay_value=delay_value,
            double_dqn=False,
            gamma=gamma,
            action_space=action_space,
            reduction=reduction,
            use_prioritized_weights=False,
        )
        self.min_q_weight = min_q_weight

    _loss_key = "loss_qvalue"

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase) -> Tensor:
        # TorchRL 0.14.1: max_a Q(s', a) of the live network, not of the target copy.
        next_values = self._action_values(next_td, None)
        scores = next_values
        mask = next_td.get(self.tensor_keys.action_mask, None)
        if mask is not None:
            scores = scores.masked_fill(~mask.bool(), float("-inf"))
        return next_values.gather(-1, scores.argmax(-1, keepdim=True))

    def _cql_output(
        self, td: TensorDictBase, pred: Tensor, target: Tensor, action_values: Tensor
    ) -> TensorDictBase:
        out = self._output(td, pred, target)
        out.set(self._loss_key, 0.5 * out.get(self._loss_key))
        # TorchRL: the mean of every action's value, and of the targets.
        out.set("pred_value", action_values.detach().mean())
        out.set("target_value", target.mean())
        return out

    def _priority_output(self, td_error: Tensor) -> Tensor | None:
        return td_error.mean(0)  # TorchRL's output holds the batch mean ([1])

    def _cql_terms(
        self, td: TensorDictBase, pred: Tensor, action_values: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``(loss_cql, gap)``: ``logsumexp_a Q(s, a) - Q(s, a_data)`` over the allowed actions."""
        mask = td.get(self.tensor_keys.action_mask, None)
        if mask is not None:
            action_values = action_values.masked_fill(~mask.bool(), float("-inf"))
        gap = torch.logsumexp(action_values, -1, keepdim=True) - pred
        return self.min_q_weight * batch_mean(gap, td, None, self), gap.detach().mean()

    def value_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The Bellman loss, as TorchRL's ``DiscreteCQLLoss.value_loss``.

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_qvalue, metadata)`` with ``"td_error"`` (its batch mean, as TorchRL's),
            ``"pred_value"`` (the mean of every action's value) and ``"target_value"``.

        Examples:
            >>> from tdrl.testing import make_action_value_net, make_transition_batch
            >>> loss = DiscreteCQLLoss(make_action_value_net(), action_space="categorical")
            >>> batch = make_transition_batch(batch=(8,), action="index")
            >>> loss_qvalue, meta = loss.value_loss(batch)
            >>> loss_cql, _ = loss.cql_loss(batch)
            >>> sorted(meta), loss_cql.shape
            (['pred_value', 'target_value', 'td_error'], torch.Size([]))
        """
        pred, target, action_values = self._qvalue_terms(tensordict)
        out = self._cql_output(tensordict, pred, target, action_values)
        loss = out.pop(self._loss_key)
        error = out.get(self.tensor_keys.priority)
        # TorchRL's metadata holds the TD error's batch mean (the batch gets it per sample).
        return loss, {
            self.tensor_keys.priority: error.mean(0),
            "pred_value": out.get("pred_value"),
            "target_value": out.get("target_value"),
        }

    def cql_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The conservative term, as TorchRL's ``DiscreteCQLLoss.cql_loss``.

        It evaluates the network itself (unlike TorchRL's, it does not need ``value_loss`` to
        run first).

        Returns:
            ``(loss_cql, {"cql_gap": ...})``.
        """
        where = "DiscreteCQLLoss.cql_loss"
        action_values = self._action_values(tensordict, None)
        action = get_entry(tensordict, self.tensor_keys.action, where)
        pred = gather_action_value(action_values, action, self.action_space)
        loss, gap = self._cql_terms(tensordict, pred, action_values)
        return loss, {"cql_gap": gap}

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_qvalue``, ``loss_cql`` and the diagnostics."""
        pred, target, action_values = self._qvalue_terms(tensordict)
        out = self._cql_output(tensordict, pred, target, action_values)
        loss_cql, _ = self._cql_terms(tensordict, pred, action_values)
        out.set("loss_cql", loss_cql)
        return out
