"""TD3Loss: twin delayed DDPG (clipped double-Q targets, target policy smoothing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._base import LossModule
from tdrl.objectives._ensemble import QEnsemble, ensemble_distance, ensemble_target
from tdrl.objectives._utils import (
    acted,
    action_bounds,
    batch_mean,
    check_loss_function,
    check_prioritized_weights,
    get_entry,
    plain_layers,
    value_target,
)
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import TensorSpec

__all__ = ["TD3Loss"]


class TD3Loss(LossModule):
    """The TD3 loss (Fujimoto et al., 2018).

    ``num_qvalue_nets`` critics (a :class:`~tdrl.objectives.QEnsemble` built from
    ``qvalue_network``: copy 0 keeps its weights, the others are re-initialised) regress on
    ``r + gamma * min_i Q'_i(s', clamp(mu'(s') + clip(noise)))`` with Gaussian noise of std
    ``policy_noise`` clipped to ``[-noise_clip, noise_clip]`` and the action clamped to the
    bounds (from ``action_spec`` or ``bounds``; not clamped when neither is given). The actor
    maximises the first critic, ``Q_0(s, mu(s))``. Delaying the policy update is the caller's
    job: step the actor's optimiser (and the target updater) every ``policy_delay`` updates.

    ``actor_network`` writes the action; ``qvalue_network`` reads the observation and the
    action and writes ``"state_action_value"``. Terminated steps do not bootstrap, truncated
    ones do (TD(0) by default, see :meth:`make_value_estimator`).

    Output: ``"loss_actor"`` (trains the actor only), ``"loss_qvalue"`` (the sum over critics
    of their mean distance to the target, weighted by ``"priority_weight"`` when present as in
    TorchRL), and detached diagnostics per sample as TorchRL: ``"pred_value"`` and
    ``"state_action_value_actor"`` (one row per critic), ``"target_value"`` and
    ``"next_state_value"``. The ``"td_error"`` (the largest squared error among the critics
    per sample, shape ``batch.batch_size``) is written into the batch as TorchRL does.
    :meth:`actor_loss` and :meth:`value_loss` compute each part alone (TorchRL's methods).

    Args:
        actor_network: the deterministic policy.
        qvalue_network: the critic, copied ``num_qvalue_nets`` times (or a list of
            ``num_qvalue_nets`` critics of one architecture, used as given).
        num_qvalue_nets: the number of critics.
        policy_noise: std of the target policy smoothing noise.
        noise_clip: the noise is clipped to ``[-noise_clip, noise_clip]``.
        action_spec: a ``Bounded`` action spec (or a Composite holding one) for the clamp.
        bounds: ``(low, high)`` for the clamp, instead of ``action_spec``.
        loss_function: ``"smooth_l1"`` (default, as TorchRL), ``"l2"`` (the squared error) or ``"l1"``.
        delay_actor: use a target actor for the next action.
        delay_qvalue: use target critics for the next value.
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        priority_key: the output key of the TD error (default ``"td_error"``).
        use_prioritized_weights: ``"auto"``/``True`` weight the Q and actor losses by the
            batch's ``"priority_weight"`` when present (as TorchRL); ``False`` never.
        reduction: only ``None``/``"mean"``.
        separate_losses, deactivate_vmap: TorchRL's; only their defaults are accepted.

    Examples:
        >>> from tdrl.testing import (make_deterministic_actor, make_qvalue_critic,
        ...     make_transition_batch)
        >>> loss = TD3Loss(make_deterministic_actor(), make_qvalue_critic(), bounds=(-1.0, 1.0))
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"]).backward()
        >>> batch["td_error"].shape, out["state_action_value_actor"].shape
        (torch.Size([4]), torch.Size([2, 4]))
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the action, the critics' output and the transition's reward and flags."""

        action: NestedKey = "action"
        state_action_value: NestedKey = "state_action_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = ValueEstimators.TD0

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase | Sequence[TensorDictModuleBase],
        *,
        action_spec: TensorSpec | None = None,
        bounds: tuple[float | Tensor, float | Tensor] | None = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        gamma: float | None = None,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        where = f"{type(self).__name__}.__init__"
        self._torchrl_options(
            gamma=gamma,
            priority_key=priority_key,
            reduction=reduction,
            separate_losses=(separate_losses, False),
            deactivate_vmap=(deactivate_vmap, False),
        )
        self.use_prioritized_weights = check_prioritized_weights(use_prioritized_weights, where)
        self.loss_function = check_loss_function(loss_function, where)
        if policy_noise < 0 or noise_clip < 0:
            raise ValueError(
                f"{where}: policy_noise and noise_clip must be >= 0 (got {policy_noise}, "
                f"{noise_clip})."
            )
        self.actor_network = actor_network
        self.qvalue_network = QEnsemble(qvalue_network, num_qvalue_nets)
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.delay_actor = delay_actor
        bound = action_bounds(action_spec, bounds, where)
        self.register_buffer("action_low", None if bound is None else bound[0])
        self.register_buffer("action_high", None if bound is None else bound[1])
        self._actor_layers = plain_layers(actor_network)
        if delay_actor:
            self._make_target("actor_network")
        if delay_qvalue:
            self._make_target("qvalue_network")

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase, where: str) -> Tensor:
        keys = self.tensor_keys
        target_actor = self.actor_network_target_params if self.delay_actor else None
        next_td, replace = self._acted(next_td, target_actor)
        action = replace.get(keys.action)
        if action is None:
            action = get_entry(next_td, keys.action, where)
        noise = torch.randn_like(action).mul_(self.policy_noise)
        action = action + noise.clamp_(-self.noise_clip, self.noise_clip)
        if self.action_low is not None:
            action = action.clamp(self.action_low, self.action_high)
        values = self.qvalue_network(
            next_td,
            ensemble_target(self),
            out_key=keys.state_action_value,
            replace={keys.action: action},
        )
        return values.amin(0)

    def _acted(
        self, td: TensorDictBase, params: TensorDictBase | None
    ) -> tuple[TensorDictBase, dict[NestedKey, Tensor]]:
        return acted(self.actor_network, self._actor_layers, td, params, self.tensor_keys.action)

    def value_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' loss and its diagnostics, as TorchRL's ``TD3Loss.value_loss``.

        Returns:
            ``(loss_qvalue, metadata)`` with ``"td_error"``, and per sample (detached, as
            TorchRL) ``"next_state_value"`` and ``"target_value"`` (``batch.batch_size``) and
            ``"pred_value"`` (``[num_qvalue_nets, *batch]``).
        """
        return self._value_loss(tensordict, "TD3Loss.value_loss")

    def _value_loss(
        self, tensordict: TensorDictBase, where: str
    ) -> tuple[Tensor, dict[str, Tensor]]:
        key = self.tensor_keys.state_action_value
        pred = self.qvalue_network(tensordict, out_key=key)
        next_value = self._next_value(get_entry(tensordict, "next", where), where)
        target = value_target(self, tensordict, pred[0].detach(), next_value, where)
        weight_key = self.tensor_keys.priority_weight if self.use_prioritized_weights else None
        loss_qvalue, td_error = ensemble_distance(
            pred, target, self.loss_function, tensordict, weight_key, owner=self
        )
        metadata = {
            "td_error": td_error,
            # Per sample, as TorchRL (the values' last dim of size 1 dropped).
            "next_state_value": next_value.squeeze(-1),
            "pred_value": pred.detach().squeeze(-1),  # one row per critic
            "target_value": target.squeeze(-1),
        }
        return loss_qvalue, metadata

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss ``-Q_0(s, mu(s))``, as TorchRL's ``TD3Loss.actor_loss``.

        Returns:
            ``(loss_actor, metadata)`` with ``"state_action_value_actor"``: every critic's
            value of the policy's action, ``[num_qvalue_nets, *batch]`` (detached).
        """
        key = self.tensor_keys.state_action_value
        td, replace = self._acted(tensordict, None)
        # The first critic trains the actor (its weights detached: no gradient to them).
        value = self.qvalue_network(td, out_key=key, detach=True, member=0, replace=replace)
        with torch.no_grad():  # TorchRL's diagnostic: every critic scores the action
            values = self.qvalue_network(td, out_key=key, replace=replace)
        weight_key = self.tensor_keys.priority_weight if self.use_prioritized_weights else None
        loss = -batch_mean(value, tensordict, weight_key, self)
        return loss, {"state_action_value_actor": values.squeeze(-1)}

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_qvalue`` and the diagnostics on a batch."""
        loss_qvalue, value_meta = self.value_loss(tensordict)
        loss_actor, actor_meta = self.actor_loss(tensordict)
        td_error = value_meta.pop("td_error")
        out = TensorDict(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, **value_meta, **actor_meta}
        )
        out.set(self.tensor_keys.priority, td_error)
        return out
