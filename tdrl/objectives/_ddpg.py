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
    act,
    call_with_params,
    check_loss_function,
    detached,
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
    target), and detached diagnostics ``"td_error"`` (per sample, shape
    ``batch.batch_size``), ``"pred_value"`` and ``"target_value"`` (means).

    Args:
        actor_network: the deterministic policy (a tensordict module).
        value_network: the critic (a tensordict module).
        loss_function: ``"l2"`` (half the squared error), ``"smooth_l1"`` or ``"l1"``.
        delay_actor: use a target actor for the next action.
        delay_value: use a target critic for the next value.

    Examples:
        >>> from tdrl.testing import (make_deterministic_actor, make_qvalue_critic,
        ...     make_transition_batch)
        >>> loss = DDPGLoss(make_deterministic_actor(), make_qvalue_critic())
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_value"]).backward()
        >>> sorted(out.keys())
        ['loss_actor', 'loss_value', 'pred_value', 'target_value', 'td_error']
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the critic's output and the transition's reward and flags."""

        state_action_value: NestedKey = "state_action_value"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"

    default_value_estimator = ValueEstimators.TD0

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
    ) -> None:
        super().__init__()
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

    def _q(self, td: TensorDictBase, params: TensorDictBase | None) -> Tensor:
        key, where = self.tensor_keys.state_action_value, "DDPGLoss.forward"
        return call_with_params(self.value_network, self._value_layers, td, params, key, where)

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase) -> Tensor:
        next_td = next_td.copy()
        act(self.actor_network, self._actor_layers, next_td, self._target("actor_network"))
        return self._q(next_td, self._target("value_network"))

    def _target(self, name: str) -> TensorDictBase | None:
        return getattr(self, f"{name}_target_params", None)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor``, ``loss_value`` and the diagnostics on a batch."""
        where = "DDPGLoss.forward"
        pred = self._q(tensordict, None)
        next_value = self._next_value(get_entry(tensordict, "next", where))
        target = value_target(self, tensordict, pred.detach(), next_value, where)
        loss_value = distance(pred, target, self.loss_function).mean()

        acted = tensordict.copy()
        act(self.actor_network, self._actor_layers, acted, None)
        loss_actor = -self._q(acted, detached(self.value_network)).mean()
        out = TensorDict(
            {
                "loss_actor": loss_actor,
                "loss_value": loss_value,
                "pred_value": pred.detach().mean(),
                "target_value": target.mean(),
            }
        )
        out.set(self.tensor_keys.priority, per_sample(pred - target, tensordict.batch_dims))
        return out
