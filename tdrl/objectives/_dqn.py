"""DQNLoss: (double) deep Q-learning over one-hot or index actions, mask-aware targets."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._base import LossModule
from tdrl.objectives._utils import (
    batch_mean,
    call_with_params,
    check_loss_function,
    check_prioritized_weights,
    distance,
    gather_action_value,
    get_entry,
    plain_layers,
    resolve_action_space,
    value_target,
)
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import TensorSpec

__all__ = ["DQNLoss"]


class DQNLoss(LossModule):
    """The DQN loss: regress ``Q(s, a)`` on ``r + gamma * max_a' Q_target(s', a')``.

    ``value_network`` reads the observation and writes one value per action at
    ``"action_value"`` (``[*B, n_actions]``; a ``QValueActor`` or any tensordict module). The
    taken action (one-hot or index) is read at ``"action"``. The target is built with the
    value estimator (TD(0) by default, see :meth:`make_value_estimator`) from
    ``("next", "reward")``, ``("next", "done")`` and ``("next", "terminated")``: terminated
    steps do not bootstrap, truncated ones do. When ``("next", "action_mask")`` is present
    (True = allowed), masked actions are never the argmax of the target.

    Output: ``"loss"`` (the mean distance, TorchRL's key and only output; weighted by the
    batch's ``"priority_weight"`` when present and ``use_prioritized_weights`` is
    ``"auto"``/``True``, as TorchRL's). As TorchRL's, the loss writes the detached
    ``"td_error"`` into ``batch`` (its only write): ``(Q(s, a) - target) ** 2`` with the
    value's trailing dim, ``[*batch, 1]`` (``[*batch, n_agents, 1]`` for a group), so
    ``loss(batch)`` followed by ``buffer.update_tensordict_priority(batch)`` feeds a
    prioritized replay buffer (which reduces the extra dims).

    Args:
        value_network: the Q-network (a tensordict module writing the action values).
        loss_function: ``"l2"`` (the squared error), ``"smooth_l1"`` (Huber) or ``"l1"``.
        delay_value: keep a target copy of the network (updated by ``SoftUpdate`` /
            ``HardUpdate``) for the bootstrap values.
        double_dqn: pick the next action with the live network and evaluate it with the
            target (Double DQN).
        gamma: the discount of the default value estimator (TorchRL's deprecated argument;
            prefer ``make_value_estimator(gamma=...)``).
        action_space: ``"one_hot"`` (or ``"one-hot"``), ``"categorical"`` or a
            ``OneHot``/``Categorical`` spec; by default taken from the network's
            ``QValueModule``, else inferred from the data (an action shaped like the action
            values is one-hot).
        priority_key: the output key of the TD error (default ``"td_error"``).
        reduction: only ``None``/``"mean"`` (TorchRL's ``"sum"``/``"none"`` are refused).
        use_prioritized_weights: ``"auto"``/``True`` weight the loss by the batch's
            ``"priority_weight"`` when present; ``False`` never.

    A lazy network (``nn.LazyLinear``, an ``MLP`` without ``in_features``) gets its target at
    the first call, after its weights were built.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> net = TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(net, action_space="categorical")
        >>> batch = TensorDict({
        ...     "observation": torch.randn(8, 4), "action": torch.randint(2, (8,)),
        ...     "next": {"observation": torch.randn(8, 4), "reward": torch.ones(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
        >>> out = loss(batch)
        >>> out["loss"].backward()
        >>> list(out.keys()), batch["td_error"].shape
        (['loss'], torch.Size([8, 1]))
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the network's output, the action, the mask and the transition's flags.

        ``advantage``, ``value`` and ``value_target`` are the value estimator's keys (forwarded
        to it, as TorchRL; ``value`` defaults to TorchRL's ``"chosen_action_value"``). The loss
        hands the estimator tensors, so nothing is read or written at them in the batch.
        """

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "chosen_action_value"
        action_value: NestedKey = "action_value"
        action: NestedKey = "action"
        action_mask: NestedKey = "action_mask"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority: NestedKey = "td_error"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = ValueEstimators.TD0
    _loss_key = "loss"

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        double_dqn: bool = False,
        gamma: float | None = None,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
        reduction: str | None = None,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        super().__init__()
        name = f"{type(self).__name__}.__init__"
        self._torchrl_options(gamma=gamma, priority_key=priority_key, reduction=reduction)
        self.use_prioritized_weights = check_prioritized_weights(use_prioritized_weights, name)
        self.loss_function = check_loss_function(loss_function, name)
        self.value_network = value_network
        self.delay_value = delay_value
        self.double_dqn = double_dqn
        self.action_space = resolve_action_space(action_space, value_network, name)
        self._layers = plain_layers(value_network)
        if delay_value:
            self._make_target("value_network")

    def _action_values(self, td: TensorDictBase, params: TensorDictBase | None) -> Tensor:
        where = f"{type(self).__name__}.forward"
        key = self.tensor_keys.action_value
        return call_with_params(self.value_network, self._layers, td, params, key, where)

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase) -> Tensor:
        target = self.value_network_target_params if self.delay_value else None
        next_values = self._action_values(next_td, target)
        scores = self._action_values(next_td, None) if self.double_dqn else next_values
        mask = next_td.get(self.tensor_keys.action_mask, None)
        if mask is not None:
            scores = scores.masked_fill(~mask.bool(), float("-inf"))
        return next_values.gather(-1, scores.argmax(-1, keepdim=True))

    def _qvalue_terms(self, td: TensorDictBase) -> tuple[Tensor, Tensor, Tensor]:
        """``(pred, target, action_values)`` for the taken actions."""
        where = f"{type(self).__name__}.forward"
        action_values = self._action_values(td, None)
        action = get_entry(td, self.tensor_keys.action, where)
        pred = gather_action_value(action_values, action, self.action_space)
        next_value = self._next_value(get_entry(td, "next", where))
        target = value_target(self, td, pred.detach(), next_value, where)
        return pred, target, action_values

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_qvalue`` and the diagnostics on a batch of transitions."""
        pred, target, _ = self._qvalue_terms(tensordict)
        return self._output(tensordict, pred, target)

    def _output(self, td: TensorDictBase, pred: Tensor, target: Tensor) -> TensorDictBase:
        weight_key = self.tensor_keys.priority_weight if self.use_prioritized_weights else None
        error = distance(pred, target, self.loss_function)
        loss = batch_mean(error, td, weight_key, self)
        out = TensorDict({self._loss_key: loss})
        # TorchRL's priority: the squared error with the value's trailing dim ([*B, 1], or
        # [*B, n_agents, 1]); a prioritized buffer reduces the extra dims itself. With "l2"
        # it is the distance already computed (the same op on the same values).
        same = self.loss_function == "l2" and error.shape == pred.shape
        priority = error.detach() if same else (pred - target).detach().square()
        out.set(self.tensor_keys.priority, priority)
        return out
