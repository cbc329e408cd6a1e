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
from tdrl.objectives._mask import masked_mean, standardize_shifted
from tdrl.objectives.value import ValueEstimators

__all__ = ["PolicyGradientLoss", "distance_loss"]

_DISTANCES = ("l2", "smooth_l1", "l1")


def distance_loss(v1: Tensor, v2: Tensor, loss_function: str, strict_shape: bool = True) -> Tensor:
    """Element-wise ``l2`` (the squared error, no 0.5 factor), ``smooth_l1`` (Huber) or ``l1``.

    Args:
        v1: a tensor.
        v2: a tensor of ``v1``'s shape (broadcastable when ``strict_shape=False``).
        loss_function: ``"l2"``, ``"smooth_l1"`` or ``"l1"``.
        strict_shape: refuse tensors of different shapes (TorchRL's default).

    Raises:
        ValueError: different shapes with ``strict_shape``, or an unknown ``loss_function``.

    Examples:
        >>> distance_loss(torch.tensor([2.0]), torch.tensor([0.0]), "l2")
        tensor([4.])
    """
    if strict_shape and v1.shape != v2.shape:
        raise ValueError(
            f"distance_loss: the tensors have different shapes (got {tuple(v1.shape)} and "
            f"{tuple(v2.shape)}; expected equal shapes). Pass strict_shape=False to broadcast."
        )
    if loss_function == "l2":
        return (v1 - v2).square()
    if loss_function == "smooth_l1":
        a, b = torch.broadcast_tensors(v1, v2)
        return torch.nn.functional.smooth_l1_loss(a, b, reduction="none")
    if loss_function == "l1":
        return (v1 - v2).abs()
    raise ValueError(
        f"distance_loss: unknown loss type (got {loss_function!r}; expected one of {_DISTANCES})."
    )


def _match(x: Tensor, like: Tensor) -> Tensor:
    """Adds trailing singleton dims to ``x`` until it has ``like``'s ndim (log-probs vs [.., 1])."""
    while x.ndim < like.ndim:
        x = x.unsqueeze(-1)
    return x


class PolicyGradientLoss(LossModule):
    """Actor (a probabilistic module with ``get_dist``), optional critic, entropy bonus.

    Subclasses choose the objective with ``_objective(td, dist, log_prob, advantage, source)
    -> (loss, diagnostics)``; the default is the likelihood-ratio gradient ``-E[log pi(a|s) * A]``
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

    _objective_key = "loss_objective"
    _critic_key = "loss_critic"
    _log_explained_variance = True
    _keys_from_actor = True  # TorchRL's PPO and A2C; its REINFORCE keeps the default keys

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: TensorDictModule | None = None,
        *,
        entropy_bonus: bool = True,
        samples_mc_entropy: int = 1,
        entropy_coeff: float | None = None,
        log_explained_variance: bool | None = None,
        critic_coeff: float | None = None,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        clip_value: float | None = None,
        gamma: float | None = None,
        advantage_key: NestedKey | None = None,
        value_target_key: NestedKey | None = None,
        value_key: NestedKey | None = None,
        reduction: str | None = None,
        actor: Any = None,
        critic: TensorDictModule | None = None,
        entropy_coef: float | None = None,
        critic_coef: float | None = None,
        **torchrl_only: Any,
    ) -> None:
        super().__init__()
        where = f"{type(self).__name__}.__init__"
        exclude = torchrl_only.pop("normalize_advantage_exclude_dims", ())
        self.normalize_advantage_exclude_dims = _exclude_dims(exclude, where)
        defaults = {k: v for k, v in _TORCHRL_ONLY.items() if k in torchrl_only}
        unknown = sorted(set(torchrl_only) - set(_TORCHRL_ONLY))
        if unknown:
            raise TypeError(f"{where}: unexpected keyword argument(s) {unknown}.")
        self._torchrl_options(
            gamma=gamma,
            reduction=reduction,
            **{k: (torchrl_only[k], default) for k, default in defaults.items()},
        )
        actor_network = _one_of(where, "actor_network", actor_network, "actor", actor)
        critic_network = _one_of(where, "critic_network", critic_network, "critic", critic)
        entropy_coeff = _one_of(where, "entropy_coeff", entropy_coeff, "entropy_coef", entropy_coef)
        critic_coeff = _one_of(where, "critic_coeff", critic_coeff, "critic_coef", critic_coef)
        if loss_critic_type not in _DISTANCES:
            raise ValueError(
                f"{where}: unknown loss_critic_type (got {loss_critic_type!r}; expected one of "
                f"{_DISTANCES})."
            )
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{where}: actor_network has no get_dist (got {type(actor_network).__name__}; "
                "expected a ProbabilisticActor or a ProbabilisticTensorDictSequential)."
            )
        keys = {"advantage": advantage_key, "value_target": value_target_key, "value": value_key}
        self.set_keys(**{k: v for k, v in keys.items() if v is not None})
        self.actor_network = actor_network
        self.critic_network = critic_network
        self.entropy_bonus = entropy_bonus
        self.samples_mc_entropy = samples_mc_entropy
        self.entropy_coeff = 0.01 if entropy_coeff is None else float(entropy_coeff)
        self.critic_coeff = 1.0 if critic_coeff is None else float(critic_coeff)
        self.loss_critic_type = loss_critic_type
        self.normalize_advantage = normalize_advantage
        self.clip_value = clip_value
        if log_explained_variance is not None:
            self._log_explained_variance = log_explained_variance
        if self._keys_from_actor:
            self._take_actor_keys(actor_network)

    def _take_actor_keys(self, actor: Any) -> None:
        """Reads ``action``/``sample_log_prob`` from the actor's keys, as TorchRL's PPO/A2C do.

        A ``ProbabilisticActor(out_keys=[("agents", "action")], return_log_prob=True)`` writes
        its log-prob at ``("agents", "action_log_prob")`` (or its ``log_prob_key``): the loss
        reads it there. Actors without these attributes keep the defaults; ``set_keys`` wins.
        """
        log_prob_keys = getattr(actor, "log_prob_keys", None)
        sample_keys = getattr(actor, "dist_sample_keys", None)
        if not log_prob_keys or not sample_keys:
            return
        if len(log_prob_keys) > 1 or len(sample_keys) > 1:
            raise NotImplementedError(
                f"{type(self).__name__}.__init__: the actor samples several actions (got "
                f"dist_sample_keys={list(sample_keys)}; expected one). tdrl's policy-gradient "
                "losses support one action key."
            )
        self.set_keys(sample_log_prob=log_prob_keys[0], action=sample_keys[0])

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
            # As TorchRL's PPO: a "shifted_valid" entry (whatever loss_mask_key says) keeps
            # the invalid positions out of the statistics.
            valid = td.get("shifted_valid", None)
            if valid is None:
                adv = _standardize(adv, self.normalize_advantage_exclude_dims)
            else:
                adv = standardize_shifted(adv, valid, self.normalize_advantage_exclude_dims)
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

    def _critic_terms(self, td: TensorDictBase) -> tuple[Tensor, Tensor | None, Tensor]:
        """``(critic_coeff * per-element loss, value clip fraction or None, explained var.)``."""
        where = f"{type(self).__name__}.loss_critic"
        if self.critic_network is None:
            raise RuntimeError(
                f"{where}: this loss has no critic (got critic_network=None; expected a value "
                "module). Build the loss with a critic_network."
            )
        keys = self.tensor_keys
        target = td.get(keys.value_target, None)
        if target is None:
            raise KeyError(
                f"{where}: the value target {keys.value_target!r} is missing (available keys: "
                f"{sorted(map(str, td.keys(True, True)))}). Run the value estimator on the "
                "batch first (loss.value_estimator(batch))."
            )
        old = None
        if self.clip_value is not None:
            old = td.get(keys.value, None)
            if old is None:
                raise KeyError(
                    f"{where}: clip_value={self.clip_value} needs the collection-time value "
                    f"{keys.value!r} (got none; available keys: "
                    f"{sorted(map(str, td.keys(True, True)))}). Store the critic's value."
                )
        inputs = td.select(*self.critic_network.in_keys, strict=False)
        value = self.critic_network(inputs).get(keys.value)
        target, value, old = self._critic_loss_inputs(target, value, old)
        loss = distance_loss(value, target, self.loss_critic_type, strict_shape=False)
        clip_fraction = None
        if old is not None and self.clip_value is not None:
            change = value - old
            clipped = change.clamp(-self.clip_value, self.clip_value)
            loss = torch.maximum(
                loss, distance_loss(old + clipped, target, self.loss_critic_type, False)
            )
            clip_fraction = (change != clipped).float().mean().detach()
        with torch.no_grad():
            # TorchRL's: population variances over the first (batch) dim, shape
            # ``value.shape[1:]`` (``[1]`` for a flat batch of values).
            eps = torch.finfo(target.dtype).eps
            resid = torch.var(target - value, dim=0, correction=0)
            explained = 1.0 - resid / (torch.var(target, dim=0, correction=0) + eps)
        return self.critic_coeff * loss, clip_fraction, explained

    def _critic_loss_inputs(
        self, target: Tensor, value: Tensor, old: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """TorchRL's hook on ``(value_target, value, collection-time value)`` before the
        distance, the value clipping and the explained variance: unchanged here; MAPPOLoss
        normalises them with its ``value_norm``."""
        return target, value, old

    def loss_critic(self, tensordict: TensorDictBase) -> tuple[Tensor, Tensor | None]:
        """The critic's loss, as TorchRL's A2C/REINFORCE ``loss_critic``.

        Args:
            tensordict: a batch holding the value target (run the value estimator first) and,
                with ``clip_value``, the collection-time value.

        Returns:
            ``(critic_coeff * distance(value, value_target), value_clip_fraction)``: the loss
            per element (``forward`` averages it) and the fraction of clipped values (None
            without ``clip_value``).

        Raises:
            KeyError: the value target (or, with ``clip_value``, the stored value) is missing.
            RuntimeError: the loss has no critic.

        Examples:
            >>> from tdrl.objectives import A2CLoss
            >>> from tdrl.testing import (make_categorical_actor, make_state_value_net,
            ...     make_transition_batch)
            >>> loss = A2CLoss(make_categorical_actor(), make_state_value_net())
            >>> batch = loss.value_estimator(make_transition_batch(batch=(2, 5), action="one_hot"))
            >>> value_loss, clip_fraction = loss.loss_critic(batch)
            >>> value_loss.shape, clip_fraction
            (torch.Size([2, 5, 1]), None)
        """
        loss, clip_fraction, _ = self._critic_terms(tensordict)
        return loss, clip_fraction

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
        source: TensorDictBase,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        # The likelihood-ratio gradient -E[log pi(a|s) * A] (A2C, REINFORCE); PPO overrides it.
        # ``source`` is the caller's batch, before the actor rewrote its outputs in ``td``.
        return -masked_mean(self, log_prob * advantage.detach(), td), {}

    # ---------------------------------------------------------------- forward
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Returns ``loss_objective`` (+ ``loss_entropy``, ``loss_critic``) and diagnostics."""
        td = tensordict.copy()
        advantage = self._advantage(td)
        dist, log_prob = self._dist_and_log_prob(td)
        log_prob = _match(log_prob, advantage)
        objective, diag = self._objective(td, dist, log_prob, advantage, tensordict)
        out = {self._objective_key: objective, **{k: v.detach() for k, v in diag.items()}}
        if self.entropy_bonus:
            entropy = self._entropy(dist)
            mean_entropy = entropy.mean()
            # The diagnostic is the plain mean (TorchRL's), the loss term the masked one.
            valid_entropy = masked_mean(self, entropy, td, unmasked=mean_entropy)
            out["loss_entropy"] = -self.entropy_coeff * valid_entropy
            out["entropy"] = mean_entropy.detach()
        if self.critic_network is not None:
            loss, clip_fraction, explained = self._critic_terms(td)
            out[self._critic_key] = masked_mean(self, loss, td)
            if clip_fraction is not None:
                out["value_clip_fraction"] = clip_fraction
            if self._log_explained_variance:
                out["explained_variance"] = explained
        return TensorDict(out, batch_size=[])


# TorchRL arguments tdrl accepts at their default only (anything else raises).
_TORCHRL_ONLY: dict[str, Any] = {
    "advantage_norm": None,
    "separate_losses": False,
    "functional": True,
    "delay_actor": False,
    "delay_value": False,
    "max_importance_ratio": None,
    "device": None,
    "samples_mc_kl": 1,
}


def _exclude_dims(dims: Any, where: str) -> tuple[int, ...]:
    if not isinstance(dims, tuple | list) or not all(isinstance(d, int) for d in dims):
        raise TypeError(
            f"{where}: normalize_advantage_exclude_dims must be a tuple of ints (got {dims!r};"
            " expected e.g. (-2,) to keep the agent dim out of the statistics)."
        )
    if len(set(dims)) != len(dims):
        raise ValueError(
            f"{where}: normalize_advantage_exclude_dims repeats a dim (got {dims!r}; expected"
            " distinct dims). Pass each dim once."
        )
    return tuple(dims)


def _standardize(adv: Tensor, exclude: tuple[int, ...]) -> Tensor:
    """``(adv - mean) / std`` over every dim but ``exclude`` (TorchRL's statistics: unbiased
    std, clamped at float32's resolution)."""
    if not exclude:
        return (adv - adv.mean()) / adv.std().clamp_min(1e-6)
    skip = {d % adv.ndim for d in exclude}
    dims = tuple(d for d in range(adv.ndim) if d not in skip)
    if not dims:
        return adv
    mean = adv.mean(dim=dims, keepdim=True)
    return (adv - mean) / adv.std(dim=dims, keepdim=True).clamp_min(1e-6)


def _one_of(where: str, name: str, value: Any, old_name: str, old: Any) -> Any:
    """``value``, or its older spelling ``old`` (TorchRL's ``actor=``, tdrl's ``entropy_coef=``)."""
    if old is None:
        return value
    if value is not None:
        raise TypeError(
            f"{where}: {name} and {old_name} are the same argument (got both); pass only {name}."
        )
    return old
