"""REDQLoss: randomized ensembled double Q-learning (Chen et al., 2021)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor

from tdrl.objectives._ensemble import ensemble_target
from tdrl.objectives._sac import QNetworks, SACLoss
from tdrl.specs import TensorSpec

__all__ = ["REDQLoss"]


class REDQLoss(SACLoss):
    """REDQ: SAC with a large critic ensemble and a random subset of it in the target.

    All ``num_qvalue_nets`` critics (one vectorised :class:`~tdrl.objectives.QEnsemble`) are
    trained on the target ``r + gamma * (min_{i in M} Q'_i(s', a') - alpha * log pi(a'|s'))``
    where ``M`` is a fresh random subset of ``sub_sample_len`` target critics at every call
    (only those are evaluated). The actor maximises the *mean* of all critics,
    ``alpha * log pi(a|s) - mean_i Q_i(s, a)``. Everything else (keys, temperature, outputs,
    estimators, targets) is as in :class:`~tdrl.objectives.SACLoss`. A high update-to-data
    ratio (several updates per collected step) is the caller's choice.

    Args:
        actor_network: the stochastic policy.
        qvalue_network: the critic, copied ``num_qvalue_nets`` times (or a list of critics).
        num_qvalue_nets: the ensemble size N.
        sub_sample_len: the size M of the random subset used for the target.
        loss_function: ``"l2"`` (half the squared error), ``"smooth_l1"`` or ``"l1"``.
        alpha_init: the initial temperature.
        fixed_alpha: keep the temperature constant.
        target_entropy: a float, or ``"auto"`` for minus the action dimension.
        min_alpha: lower bound of the temperature.
        max_alpha: upper bound of the temperature.
        action_spec: the action spec (gives the action dimension for ``"auto"``).
        delay_qvalue: use target critics (updated by ``SoftUpdate``) for the bootstrap.

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

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: QNetworks,
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        loss_function: str = "l2",
        alpha_init: float = 1.0,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        delay_qvalue: bool = True,
    ) -> None:
        super().__init__(
            actor_network,
            qvalue_network,
            num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function,
            alpha_init=alpha_init,
            fixed_alpha=fixed_alpha,
            target_entropy=target_entropy,
            min_alpha=min_alpha,
            max_alpha=max_alpha,
            action_spec=action_spec,
            delay_qvalue=delay_qvalue,
        )
        n = self.qvalue_network.num_copies
        if not 1 <= sub_sample_len <= n:
            raise ValueError(
                f"REDQLoss.__init__: sub_sample_len must be in [1, num_qvalue_nets] (got "
                f"{sub_sample_len} for {n} critics)."
            )
        self.sub_sample_len = sub_sample_len

    def _target_members(self) -> TensorDictBase:
        params = ensemble_target(self)
        n = self.qvalue_network.num_copies
        index = torch.randperm(n, device=self.log_alpha.device)[: self.sub_sample_len]
        return params[index]

    def _reduce_actor_q(self, q: Tensor) -> Tensor:
        return q.mean(0)
