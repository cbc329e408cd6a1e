"""Shared machinery of the on-policy losses (A2C, PPO family, REINFORCE)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from tensordict.utils import NestedKey
from torch import Tensor, distributions

from tdrl.objectives._base import LossModule
from tdrl.objectives.value import ValueEstimators

__all__ = ["PolicyGradientLoss", "distance_loss"]

_DISTANCES = ("l2", "smooth_l1", "l1")


def distance_loss(a: Tensor, b: Tensor, kind: str) -> Tensor:
    """Element-wise ``l2`` (0.5 * squared error, as usual for critics), ``smooth_l1`` or ``l1``.

    Examples:
        >>> distance_loss(torch.tensor([2.0]), torch.tensor([0.0]), "l2")
        tensor([2.])
    """
    if kind == "l2":
        return 0.5 * (a - b).pow(2)
    if kind == "smooth_l1":
        return torch.nn.functional.smooth_l1_loss(a, b, reduction="none")
    if kind == "l1":
        return (a - b).abs()
    raise ValueError(
        f"distance_loss: unknown loss type (got {kind!r}; expected one of {_DISTANCES})."
    )


def _match(x: Tensor, like: Tensor) -> Tensor:
    """Adds trailing singleton dims to ``x`` until it has ``like``'s ndim (log-probs vs [.., 1])."""
    while x.ndim < like.ndim:
        x = x.unsqueeze(-1)
    return x


class PolicyGradientLoss(LossModule):
    """Actor (a probabilistic module with ``get_dist``), optional critic, entropy bonus.

    Subclasses choose the objective with ``_objective(td, dist, log_prob, advantage) ->
    (loss, diagnostics)``; the default is the likelihood-ratio gradient ``-E[log pi(a|s) * A]``
    that A2C and REINFORCE share (PPO variants replace it with their ratio objectives).
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: ``advantage``/``value_target`` (written by the estimator when missing),
        ``value`` (critic output), ``sample_log_prob`` (stored at collection), ``action``, and
        the ``reward``/``done``/``terminated`` keys the estimator reads under ``"next"``."""

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        value: NestedKey = "state_value"
        sample_log_prob: NestedKey = "action_log_prob"
        action: NestedKey = "action"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = ValueEstimators.GAE

    def __init__(
        self,
        actor_network: Any,
        critic_network: TensorDictModule | None = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coef: float = 0.01,
        critic_coef: float = 1.0,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        clip_value: float | None = None,
    ) -> None:
        super().__init__()
        if loss_critic_type not in _DISTANCES:
            raise ValueError(
                f"{type(self).__name__}.__init__: unknown loss_critic_type (got "
                f"{loss_critic_type!r}; expected one of {_DISTANCES})."
            )
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{type(self).__name__}.__init__: actor_network has no get_dist (got "
                f"{type(actor_network).__name__}; expected a ProbabilisticActor or a "
                "ProbabilisticTensorDictSequential)."
            )
        self.actor_network = actor_network
        self.critic_network = critic_network
        self.entropy_bonus = entropy_bonus
        self.samples_mc_entropy = samples_mc_entropy
        self.entropy_coef = entropy_coef
        self.critic_coef = critic_coef
        self.loss_critic_type = loss_critic_type
        self.normalize_advantage = normalize_advantage
        self.clip_value = clip_value

    def _value_network_for_estimator(self) -> TensorDictModule | None:
        return self.critic_network

    # ---------------------------------------------------------------- pieces
    def _advantage(self, td: TensorDictBase) -> Tensor:
        key = self.tensor_keys.advantage
        adv = td.get(key, None)
        if adv is None:
            if self.critic_network is None and td.get(self.tensor_keys.value, None) is None:
                raise KeyError(
                    f"{type(self).__name__}.forward: advantage {key!r} is missing and there is no "
                    f"critic to compute it (available keys: {sorted(map(str, td.keys(True, True)))})."
                    " Run a value estimator on the batch first, or give the loss a critic."
                )
            self.value_estimator(td)
            adv = td.get(key)
        if self.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / adv.std().clamp_min(1e-6)
        return adv

    def _dist_and_log_prob(self, td: TensorDictBase) -> tuple[distributions.Distribution, Tensor]:
        dist = self.actor_network.get_dist(td)
        action = td.get(self.tensor_keys.action)
        return dist, dist.log_prob(action)

    def _entropy(self, dist: distributions.Distribution) -> Tensor:
        try:
            return dist.entropy()
        except NotImplementedError:
            sample = dist.rsample((self.samples_mc_entropy,))
            return -dist.log_prob(sample).mean(0)

    def _critic_loss(self, td: TensorDictBase) -> tuple[Tensor, Tensor]:
        assert self.critic_network is not None
        target = td.get(self.tensor_keys.value_target)
        old = td.get(self.tensor_keys.value, None)
        inputs = td.select(*self.critic_network.in_keys, strict=False)
        value = self.critic_network(inputs).get(self.tensor_keys.value)
        loss = distance_loss(value, target, self.loss_critic_type)
        if self.clip_value is not None and old is not None:
            clipped = old + (value - old).clamp(-self.clip_value, self.clip_value)
            loss = torch.maximum(loss, distance_loss(clipped, target, self.loss_critic_type))
        explained = 1 - (target - value).var() / target.var().clamp_min(1e-8)
        return self.critic_coef * loss.mean(), explained.detach()

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        # The likelihood-ratio gradient -E[log pi(a|s) * A] (A2C, REINFORCE); PPO overrides it.
        return -(log_prob * advantage.detach()).mean(), {}

    # ---------------------------------------------------------------- forward
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Returns ``loss_objective`` (+ ``loss_entropy``, ``loss_critic``) and diagnostics."""
        td = tensordict.copy()
        advantage = self._advantage(td)
        dist, log_prob = self._dist_and_log_prob(td)
        log_prob = _match(log_prob, advantage)
        objective, diag = self._objective(td, dist, log_prob, advantage)
        out = {"loss_objective": objective, **{k: v.detach() for k, v in diag.items()}}
        if self.entropy_bonus:
            entropy = self._entropy(dist)
            mean_entropy = entropy.mean()
            out["loss_entropy"] = -self.entropy_coef * mean_entropy
            out["entropy"] = mean_entropy.detach()
        if self.critic_network is not None:
            out["loss_critic"], out["explained_variance"] = self._critic_loss(td)
        return TensorDict(out, batch_size=[])
