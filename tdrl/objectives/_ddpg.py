"""DDPGLoss: deterministic policy gradient with a Q-function critic."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._base import LossModule
from tdrl.objectives._utils import (
    acted,
    batch_mean,
    call_with_params,
    check_loss_function,
    check_prioritized_weights,
    distance,
    get_entry,
    per_sample,
    plain_layers,
    value_target,
)
from tdrl.objectives.value import ValueEstimators

__all__ = ["DDPGLoss"]


class DDPGLoss(LossModule):
    """The DDPG loss: a critic ``Q(s, a)`` regressed on ``r + gamma * Q'(s', mu'(s'))`` and an
    actor ``mu`` that maximises ``Q(s, mu(s))``.

    ``actor_network`` reads the observation and writes the action (under the key the critic
    reads); ``value_network`` reads the observation and the action and writes
    ``"state_action_value"``. The critic's bootstrap uses the target networks when
    ``delay_actor`` / ``delay_value`` are set (update them with ``SoftUpdate``). Terminated
    steps do not bootstrap, truncated ones do (see :meth:`make_value_estimator`; TD(0) by
    default).

    Output: ``"loss_actor"`` (``-Q(s, mu(s))`` averaged; it trains the actor only: the critic
    is evaluated with detached weights), ``"loss_value"`` (the critic's mean distance to its
    target, weighted by ``"priority_weight"`` when present as in TorchRL), and detached
    diagnostics ``"td_error"`` (the squared error per sample, shape ``batch.batch_size``, also
    written into the batch as TorchRL does), ``"pred_value"`` and
    ``"target_value"`` (per sample, the critic's shape without its last dim of size 1, as
    TorchRL), ``"pred_value_max"`` and ``"target_value_max"``.

    Args:
        actor_network: the deterministic policy (a tensordict module).
        value_network: the critic (a tensordict module).
        loss_function: ``"l2"`` (the squared error), ``"smooth_l1"`` or ``"l1"``.
        delay_actor: use a target actor for the next action.
        delay_value: use a target critic for the next value.
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        separate_losses: TorchRL's; only ``False``.
        reduction: only ``None``/``"mean"``.
        use_prioritized_weights: ``"auto"``/``True`` weight the critic and actor losses by the
            batch's ``"priority_weight"`` when present (as TorchRL); ``False`` never.

    Examples:
        >>> from tdrl.testing import (make_deterministic_actor, make_qvalue_critic,
        ...     make_transition_batch)
        >>> loss = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_value"]).backward()
        >>> sorted(out.keys())  # doctest: +NORMALIZE_WHITESPACE
        ['loss_actor', 'loss_value', 'pred_value', 'pred_value_max', 'target_value',
         'target_value_max', 'td_error']
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the critic's output and the transition's reward and flags."""

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
        value_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
        gamma: float | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        self._torchrl_options(
            gamma=gamma, reduction=reduction, separate_losses=(separate_losses, False)
        )
        self.use_prioritized_weights = check_prioritized_weights(
            use_prioritized_weights, "DDPGLoss.__init__"
        )
        self.loss_function = check_loss_function(loss_function, "DDPGLoss.__init__")
        self.actor_network = actor_network
        self.value_network = value_network
        self.delay_actor = delay_actor
        self.delay_value = delay_value
        self._actor_layers = plain_layers(actor_network)
        self._value_layers = plain_layers(value_network)
        if delay_actor:
            self._make_target("actor_network")
        if delay_value:
            self._make_target("value_network")

    def _q(
        self,
        td: TensorDictBase,
        params: TensorDictBase | None,
        detach: bool = False,
        replace: dict[NestedKey, Tensor] | None = None,
    ) -> Tensor:
        key, where = self.tensor_keys.state_action_value, "DDPGLoss.forward"
        net, layers = self.value_network, self._value_layers
        return call_with_params(net, layers, td, params, key, where, detach, replace)

    def _acted(
        self, td: TensorDictBase, params: TensorDictBase | None
    ) -> tuple[TensorDictBase, dict[NestedKey, Tensor]]:
        # The actor's own output key: where it writes its action.
        key = self.actor_network.out_keys[0]
        return acted(self.actor_network, self._actor_layers, td, params, key)

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase) -> Tensor:
        next_td, replace = self._acted(next_td, self._target("actor_network"))
        return self._q(next_td, self._target("value_network"), replace=replace)

    def _target(self, name: str) -> TensorDictBase | None:
        return getattr(self, f"{name}_target_params", None)

    def loss_value(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critic's loss, as TorchRL's ``DDPGLoss.loss_value``.

        Args:
            tensordict: a batch of transitions.

        Returns:
            ``(loss_value, metadata)``: the loss averaged over the batch (weighted by the
            priority weights when used) and the per-sample ``"td_error"`` with the detached
            per-sample ``"pred_value"`` and ``"target_value"`` (the value's last dim of size
            1 dropped, as TorchRL) and their maxima ``"pred_value_max"``,
            ``"target_value_max"``.

        Examples:
            >>> from tdrl.testing import (make_deterministic_actor, make_qvalue_critic,
            ...     make_transition_batch)
            >>> loss = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())
            >>> batch = make_transition_batch(batch=(4,))
            >>> loss_value, meta = loss.loss_value(batch)
            >>> loss_actor, _ = loss.loss_actor(batch)
            >>> meta["td_error"].shape, loss_actor.shape
            (torch.Size([4]), torch.Size([]))
        """
        where = "DDPGLoss.loss_value"
        pred = self._q(tensordict, None)
        next_value = self._next_value(get_entry(tensordict, "next", where))
        target = value_target(self, tensordict, pred.detach(), next_value, where)
        weight_key = self.tensor_keys.priority_weight if self.use_prioritized_weights else None
        loss_value = batch_mean(
            distance(pred, target, self.loss_function), tensordict, weight_key, self
        )
        metadata = {
            "td_error": per_sample(pred - target, tensordict.batch_dims),
            "pred_value": pred.detach().squeeze(-1),  # per sample, as TorchRL
            "pred_value_max": pred.detach().max(),
            "target_value": target.squeeze(-1),
            "target_value_max": target.max(),
        }
        return loss_value, metadata

    def loss_actor(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss ``-Q(s, mu(s))``, as TorchRL's ``DDPGLoss.loss_actor``.

        The critic is evaluated with detached weights: this loss trains the actor only.

        Returns:
            ``(loss_actor, {})``.
        """
        td, replace = self._acted(tensordict, None)
        weight_key = self.tensor_keys.priority_weight if self.use_prioritized_weights else None
        value = self._q(td, None, detach=True, replace=replace)  # no gradient to the critic
        return -batch_mean(value, tensordict, weight_key, self), {}

    def _priority_output(self, td_error: Tensor) -> Tensor | None:
        return td_error  # TorchRL's DDPG output keeps it

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_value`` and the diagnostics on a batch."""
        loss_value, metadata = self.loss_value(tensordict)
        loss_actor, _ = self.loss_actor(tensordict)
        td_error = metadata.pop("td_error")
        out = TensorDict({"loss_actor": loss_actor, "loss_value": loss_value, **metadata})
        out.set(self.tensor_keys.priority, td_error)
        return out
