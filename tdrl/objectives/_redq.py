"""REDQLoss: randomized ensembled double Q-learning (Chen et al., 2021)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._actor_plan import policy_dist_stacked
from tdrl.objectives._ensemble import ensemble_distance, ensemble_target
from tdrl.objectives._mask import masked_reduce, valid_mask
from tdrl.objectives._sac import QNetworks, SACLoss
from tdrl.objectives._utils import draw, get_entry, value_target
from tdrl.specs import TensorSpec

__all__ = ["REDQLoss"]


class REDQLoss(SACLoss):
    """REDQ: SAC with a large critic ensemble and a random subset of it in the target.

    All ``num_qvalue_nets`` critics (one vectorised :class:`~tdrl.objectives.QEnsemble`) are
    trained on the target ``r + gamma * (min_{i in M} Q'_i(s', a') - alpha * log pi(a'|s'))``
    where ``M`` is a fresh random subset of ``sub_sample_len`` target critics at every call
    (only those are evaluated). The actor maximises the *mean* of all critics,
    ``alpha * log pi(a|s) - mean_i Q_i(s, a)``, and, as in TorchRL, ``loss_qvalue`` is the
    *mean* (not the sum) of the critics' losses, the temperature is kept in
    ``[min_alpha, max_alpha] = [0.1, 10]`` by default and priority weights are not used.
    Everything else (keys, temperature, outputs,
    estimators, targets) is as in :class:`~tdrl.objectives.SACLoss`. A high update-to-data
    ratio (several updates per collected step) is the caller's choice.

    Args:
        actor_network: the stochastic policy.
        qvalue_network: the critic, copied ``num_qvalue_nets`` times (or a list of critics).
        num_qvalue_nets: the ensemble size N.
        sub_sample_len: the size M of the random subset used for the target.
        loss_function: ``"smooth_l1"`` (default, as TorchRL), ``"l2"`` (the squared error) or ``"l1"``.
        alpha_init: the initial temperature.
        fixed_alpha: keep the temperature constant.
        target_entropy: a float, or ``"auto"`` for minus the action dimension.
        min_alpha: lower bound of the temperature (TorchRL's 0.1).
        max_alpha: upper bound of the temperature (TorchRL's 10).
        action_spec: the action spec (gives the action dimension for ``"auto"``).
        delay_qvalue: use target critics (updated by ``SoftUpdate``) for the bootstrap.
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        priority_key: the output key of the TD error (default ``"td_error"``).
        reduction: only ``None``/``"mean"``.
        gSDE, separate_losses, deactivate_vmap, scalar_output_mode: TorchRL's; only their
            defaults are accepted.

    Examples:
        >>> from tdrl.testing import (make_qvalue_critic, make_tanh_normal_actor,
        ...     make_transition_batch)
        >>> loss = REDQLoss(make_tanh_normal_actor(), make_qvalue_critic(), num_qvalue_nets=10,
        ...                 sub_sample_len=2)
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        >>> loss.qvalue_network.params["module", "0", "weight"].shape
        torch.Size([10, 16, 5])
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """TorchRL's REDQ keys: SAC's without ``log_prob``, with ``sample_log_prob``.

        ``value`` is the value estimator's value key (forwarded to it, as TorchRL).
        ``sample_log_prob`` is the key under which TorchRL's REDQ stores the sampled actions'
        log-probs in its own working copy of the batch; tdrl samples them straight into tensors,
        so the key is accepted but nothing is read or written there.
        """

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        sample_log_prob: NestedKey = "action_log_prob"
        state_action_value: NestedKey = "state_action_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"
        priority_weight: NestedKey = "priority_weight"

    _log_prob_from_actor = False  # TorchRL's REDQ has no log_prob key

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = 0.1,
        max_alpha: float | None = 10.0,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_qvalue: bool = True,
        gSDE: bool = False,
        gamma: float | None = None,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: str | None = None,
    ) -> None:
        if gSDE:
            raise ValueError(
                "REDQLoss.__init__: gSDE=True is not supported by tdrl (got True; expected "
                "False). Leave gSDE at its default."
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
            delay_qvalue=delay_qvalue,
            gamma=gamma,
            priority_key=priority_key,
            separate_losses=separate_losses,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            scalar_output_mode=scalar_output_mode,
        )
        n = self.qvalue_network.num_copies
        if not 1 <= sub_sample_len <= n:
            raise ValueError(
                f"REDQLoss.__init__: sub_sample_len must be in [1, num_qvalue_nets] (got "
                f"{sub_sample_len} for {n} critics)."
            )
        self.sub_sample_len = sub_sample_len

    _weights_supported = False
    _members = "mean"
    _squared_error = True

    def _target_members(self) -> TensorDictBase:
        params = ensemble_target(self)
        n = self.qvalue_network.num_copies
        index = torch.randperm(n, device=self.log_alpha.device)[: self.sub_sample_len]
        return params[index]

    def _reduce_actor_q(self, q: Tensor) -> Tensor:
        return q.mean(0)

    def _sample_both(self, td: TensorDictBase) -> tuple[Tensor, Tensor]:
        """Reparameterised policy actions at ``s`` and ``s'`` in one draw (TorchRL's order):
        ``[2, *B, *A]`` actions and ``[2, *B]`` log-probs (index 0: ``s``, 1: ``s'``)."""
        nxt = get_entry(td, "next", "REDQLoss.forward")
        return draw(policy_dist_stacked(self.actor_network, [td, nxt]), torch.Size())

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_qvalue``, ``loss_alpha`` and TorchRL's diagnostics."""
        where, keys = "REDQLoss.forward", self.tensor_keys
        n = self.qvalue_network.num_copies
        # TorchRL's order of random draws: the subset (on the CPU, sorted), then one draw of
        # the policy actions at s and s'.
        subset = torch.randperm(n)[: self.sub_sample_len].sort().values
        alpha = self._alpha()
        action, log_prob = self._sample_both(tensordict)
        value_key = keys.state_action_value
        acted = tensordict.copy().set(keys.action, action[0])
        q_actor = self.qvalue_network(acted, out_key=value_key, detach=True)
        loss_actor = _member_mean(self, alpha * log_prob[0].unsqueeze(-1) - q_actor, tensordict)
        next_td = get_entry(tensordict, "next", where).copy().set(keys.action, action[1].detach())
        targets = ensemble_target(self)[subset.to(self.log_alpha.device)]
        with torch.no_grad():
            q_next = self.qvalue_network(next_td, targets, out_key=value_key)
            next_value = (q_next - alpha * log_prob[1].unsqueeze(-1)).amin(0)
        pred = self.qvalue_network(tensordict, out_key=value_key)
        target = value_target(self, tensordict, pred[0].detach(), next_value, where)
        loss_qvalue, td_error = ensemble_distance(
            pred, target, self.loss_function, tensordict, None, "mean", True, owner=self
        )
        gap = log_prob.detach() + self._entropy_target(action)
        # TorchRL's REDQ temperature loss: -alpha * (log pi + target_entropy) over both draws.
        loss_alpha = _member_mean(self, -self.log_alpha.exp() * gap, tensordict)
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_qvalue": loss_qvalue,
                "loss_alpha": loss_alpha,
                "alpha": alpha,
                "entropy": -log_prob.detach().mean(),
                "state_action_value_actor": q_actor.detach().squeeze(-1),
                "action_log_prob_actor": log_prob[0].detach(),
                "next.state_value": next_value.squeeze(-1),
                "target_value": target.squeeze(-1),
            }
        )
        out.set(keys.priority, td_error)
        return out


def _member_mean(loss: REDQLoss, values: Tensor, td: TensorDictBase) -> Tensor:
    """The mean of ``values`` (``[members, *batch, ...]``) over the valid positions of the
    batch's masks (TorchRL's REDQ reduces these terms over the members too)."""
    mask = valid_mask(loss, td, values[0])
    if mask is None:
        return values.mean()
    return masked_reduce(values, mask.expand_as(values))
