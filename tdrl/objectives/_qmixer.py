"""QMixerLoss: QMIX / VDN value decomposition for a group of agents with a team reward."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

from tdrl.modules import QValueActor
from tdrl.objectives._base import LossModule, normalize_key
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

__all__ = ["QMixerLoss"]

_W = "QMixerLoss.forward"


class QMixerLoss(LossModule):
    """The QMIX loss (Rashid et al., 2018): Q-learning on the mixed value of a group of agents.

    ``local_value_network`` gives every agent its action values (``("agents",
    "action_value")``, ``[*B, n_agents, n_actions]``; usually one network shared by the agents,
    e.g. a ``QValueActor`` around a ``MultiAgentMLP``). The values of the actions the agents
    took (``("agents", "action")``, one-hot or index) are gathered into
    ``("agents", "chosen_action_value")`` (``[*B, n_agents, 1]``), which ``mixer_network``
    (a ``TensorDictModule`` around a :class:`~tdrl.modules.QMixer` or
    :class:`~tdrl.modules.VDNMixer` reading that key, and the global state for QMIX) turns into
    the group's value ``"chosen_action_value"`` (``[*B, 1]``). The target is::

        r + gamma * (1 - terminated) * mixer'(max_a Q'_i(o'_i, a), s')

    from the team reward ``("next", "reward")`` and the target copies of both networks
    (``delay_value``; update them with ``SoftUpdate``/``HardUpdate``), built by the value
    estimator (TD(0) by default, see :meth:`make_value_estimator`): terminated steps do not
    bootstrap, truncated ones do. When the local network writes the local value key itself
    (a ``QValueModule``), its greedy choice is used for ``max_a`` (so an action mask read by
    its ``action_mask_key`` is respected); otherwise the maximum of its action values.

    Output: ``"loss"`` (the mean distance between the mixed value and its target), as
    TorchRL's. The detached ``"td_error"`` (the squared error per joint transition, shape
    ``[*batch, 1]`` as TorchRL's) is written into the batch (the loss's only write), so that
    ``buffer.update_tensordict_priority(batch)`` works.

    Keys (change them with ``set_keys``): ``action_value``, ``local_value``, ``action`` (the
    group's entries), ``global_value`` (the mixer's output), ``reward``, ``done``,
    ``terminated`` (the team's, under ``"next"``), ``priority``, ``priority_weight``,
    ``advantage``, ``value_target``.

    Args:
        local_value_network: the agents' Q-network (a tensordict module writing
            ``action_value``); a plain ``nn.Module`` is wrapped, as TorchRL does, in a
            ``QValueActor`` reading ``"observation"``.
        mixer_network: a ``TensorDictModule`` reading ``local_value`` (and the state) and
            writing ``global_value``.
        loss_function: ``"l2"`` (the squared error), ``"smooth_l1"`` or ``"l1"``.
        delay_value: keep target copies of both networks for the bootstrap.
        gamma: the discount of the default value estimator (prefer
            ``make_value_estimator(gamma=...)``).
        action_space: ``"one_hot"``, ``"categorical"`` or a ``OneHot``/``Categorical`` spec;
            by default taken from the network's ``QValueModule``, else inferred from the data.
        priority_key: the output key of the TD error (default ``"td_error"``).
        use_prioritized_weights: ``False`` (default, as TorchRL's ``QMixerLoss``, which
            ignores importance weights); ``"auto"``/``True`` weight the loss by the batch's
            ``"priority_weight"`` when present, as ``DQNLoss`` does.

    Raises:
        TypeError: a mixer that is not a tensordict module.
        ValueError: (forward) a network that does not read or write the loss's keys, or a
            reward that is not one team reward per transition (``[*B, 1]``).

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import MultiAgentMLP, QMixer, QValueActor
        >>> net = MultiAgentMLP(4, 3, n_agents=2, centralized=False, share_params=True, depth=1)
        >>> qnet = QValueActor(net, in_keys=[("agents", "observation")],
        ...     action_space="categorical", action_value_key=("agents", "action_value"),
        ...     action_key=("agents", "action"),
        ...     chosen_action_value_key=("agents", "chosen_action_value"))
        >>> mixer = TensorDictModule(QMixer(state_shape=5, mixing_embed_dim=8, n_agents=2),
        ...     [("agents", "chosen_action_value"), "state"], ["chosen_action_value"])
        >>> loss = QMixerLoss(qnet, mixer)
        >>> batch = TensorDict({
        ...     "agents": {"observation": torch.randn(8, 2, 4),
        ...                "action": torch.randint(3, (8, 2))},
        ...     "state": torch.randn(8, 5),
        ...     "next": {"agents": {"observation": torch.randn(8, 2, 4)},
        ...              "state": torch.randn(8, 5), "reward": torch.ones(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, batch_size=[8])
        >>> out = loss(batch)
        >>> out["loss"].backward()
        >>> batch["td_error"].shape
        torch.Size([8, 1])
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the group's values and action, the mixed value and the team's signals."""

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        local_value: NestedKey = ("agents", "chosen_action_value")
        global_value: NestedKey = "chosen_action_value"
        action_value: NestedKey = ("agents", "action_value")
        action: NestedKey = ("agents", "action")
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"
        priority_weight: NestedKey = "priority_weight"

    default_value_estimator = ValueEstimators.TD0

    def __init__(
        self,
        local_value_network: TensorDictModuleBase | nn.Module,
        mixer_network: TensorDictModuleBase | nn.Module,
        *,
        loss_function: str = "l2",
        delay_value: bool = True,
        gamma: float | None = None,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
        use_prioritized_weights: str | bool = False,
    ) -> None:
        super().__init__()
        where = "QMixerLoss.__init__"
        self._torchrl_options(gamma=gamma, priority_key=priority_key)
        self.use_prioritized_weights = check_prioritized_weights(use_prioritized_weights, where)
        self.loss_function = check_loss_function(loss_function, where)
        if not isinstance(local_value_network, TensorDictModuleBase):
            local_value_network = QValueActor(
                local_value_network,
                in_keys=["observation"],
                action_space=action_space if isinstance(action_space, str) else None,
                spec=action_space if isinstance(action_space, TensorSpec) else None,
            )
        if not isinstance(mixer_network, TensorDictModuleBase):
            raise TypeError(
                f"{where}: mixer_network must be a tensordict module (got"
                f" {type(mixer_network).__name__}; expected e.g. TensorDictModule(QMixer(...),"
                " in_keys=[('agents', 'chosen_action_value'), 'state'],"
                " out_keys=['chosen_action_value'])). Wrap the mixer in a TensorDictModule."
            )
        self.local_value_network = local_value_network
        self.mixer_network = mixer_network
        self.delay_value = delay_value
        self._checked_keys: Any = None  # the keys _check_networks last accepted
        self._greedy = False  # whether the local network writes local_value itself
        self.action_space = resolve_action_space(action_space, local_value_network, where)
        self._local_layers = plain_layers(local_value_network)
        # A plain TensorDictModule mixer is called on tensors (no TensorDict copy per call).
        self._plain_mixer = type(mixer_network) is TensorDictModule and not (
            mixer_network._forward_hooks or mixer_network._forward_pre_hooks
        )
        if delay_value:
            self._make_target("local_value_network")
            self._make_target("mixer_network")

    # ---------------------------------------------------------------- pieces
    def _check_networks(self) -> None:
        """Checks once per set of keys that the networks read and write them."""
        keys = self.tensor_keys
        if self._checked_keys is keys:
            return
        checks = (
            (self.local_value_network.out_keys, keys.action_value, "local value network", "write"),
            (self.mixer_network.in_keys, keys.local_value, "mixer network", "read"),
            (self.mixer_network.out_keys, keys.global_value, "mixer network", "write"),
        )
        for network_keys, key, what, verb in checks:
            if key not in {normalize_key(k) for k in network_keys}:
                raise ValueError(
                    f"{_W}: the {what} does not {verb} {key!r} (got keys"
                    f" {list(network_keys)}; expected {key!r} among them). Build the network"
                    " with that key or point set_keys() at the key it uses."
                )
        local_out = {normalize_key(k) for k in self.local_value_network.out_keys}
        self._greedy = keys.local_value in local_out
        self._checked_keys = keys

    def _target_params(self, name: str) -> TensorDictBase | None:
        return getattr(self, f"{name}_target_params", None) if self.delay_value else None

    def _mix(self, td: TensorDictBase, chosen: Tensor, params: TensorDictBase | None) -> Tensor:
        """The mixer's ``global_value`` for the agents' values ``chosen`` on ``td``."""
        mixer, keys = self.mixer_network, self.tensor_keys
        if self._plain_mixer:
            inputs = [
                chosen if normalize_key(k) == keys.local_value else get_entry(td, k, _W)
                for k in mixer.in_keys
            ]
            if params is None:
                return mixer.module(*inputs)
            with params.to_module(mixer):
                return mixer.module(*inputs)
        data = td.copy()
        data.set(keys.local_value, chosen)
        if params is None:
            return get_entry(mixer(data), keys.global_value, _W)
        with params.to_module(mixer):
            return get_entry(mixer(data), keys.global_value, _W)

    @torch.no_grad()
    def _next_value(self, next_td: TensorDictBase) -> Tensor:
        """``mixer'(max_a Q'(o', a), s')`` with the target networks."""
        net, keys = self.local_value_network, self.tensor_keys
        params = self._target_params("local_value_network")
        if self._local_layers is not None or not self._greedy:
            values = call_with_params(
                net, self._local_layers, next_td, params, keys.action_value, _W
            )
            chosen = values.max(-1, keepdim=True).values
        elif params is None:
            chosen = get_entry(net(next_td.copy()), keys.local_value, _W)
        else:
            with params.to_module(net):
                chosen = get_entry(net(next_td.copy()), keys.local_value, _W)
        return self._mix(next_td, chosen, self._target_params("mixer_network"))

    def _check_reward(self, next_td: TensorDictBase, pred: Tensor) -> None:
        estimator: Any = self.value_estimator
        key = estimator.tensor_keys.reward
        reward = get_entry(next_td, key, _W)
        if reward.shape != pred.shape:
            raise ValueError(
                f"{_W}: the reward {('next', key)!r} is not one team reward per transition (got"
                f" shape {tuple(reward.shape)}; expected {tuple(pred.shape)}, the mixed value's)."
                " QMIX learns from a shared reward: sum or average the agents' rewards into one"
                " entry and point set_keys(reward=...) at it."
            )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss`` and the per-sample ``td_error`` on a batch of joint transitions."""
        keys = self.tensor_keys
        self._check_networks()
        net = self.local_value_network
        values = call_with_params(net, self._local_layers, tensordict, None, keys.action_value, _W)
        action = get_entry(tensordict, keys.action, _W)
        chosen = gather_action_value(values, action, self.action_space)
        pred = self._mix(tensordict, chosen, None)
        next_td = get_entry(tensordict, "next", _W)
        self._check_reward(next_td, pred)
        target = value_target(self, tensordict, pred.detach(), self._next_value(next_td), _W)
        weight_key = self.tensor_keys.priority_weight if self.use_prioritized_weights else None
        loss = batch_mean(distance(pred, target, self.loss_function), tensordict, weight_key)
        out = TensorDict({"loss": loss})
        out.set(keys.priority, (pred - target).detach().square())  # TorchRL's [*B, 1]
        return out
