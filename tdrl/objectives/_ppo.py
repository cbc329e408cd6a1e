"""PPO losses: the plain ratio objective, the clipped one and the KL-penalised one."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import Tensor, distributions

from tdrl.objectives._policy_gradient import PolicyGradientLoss

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]


class PPOLoss(PolicyGradientLoss):
    """PPO without clipping: ``-E[ratio * advantage]`` with ``ratio = pi(a|s) / pi_old(a|s)``.

    The batch must hold the log-probability the collecting policy gave to its actions
    (``"action_log_prob"`` by default: build the actor with ``return_log_prob=True``).
    Advantages are read from the batch, or computed with the loss's value estimator (GAE by
    default; ``make_value_estimator`` changes it) when missing.

    Args:
        actor_network: a probabilistic actor (anything with ``get_dist(td)``).
        critic_network: a value module writing ``"state_value"`` (optional).
        entropy_bonus: add ``loss_entropy = -entropy_coeff * entropy``.
        samples_mc_entropy: samples for a Monte-Carlo entropy when there is no closed form.
        entropy_coeff: weight of the entropy bonus (None: TorchRL's 0.01).
        log_explained_variance: output ``"explained_variance"`` (PPO: True, A2C and
            REINFORCE: False, as TorchRL).
        critic_coeff: weight of the critic loss (None: 1.0).
        loss_critic_type: ``"smooth_l1"`` (default), ``"l2"`` (the squared error) or ``"l1"``.
        normalize_advantage: standardise advantages over the batch.
        clip_value: clip the critic's change around the stored value (None: off).
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        advantage_key, value_target_key, value_key: TorchRL's shortcuts for ``set_keys``.
        reduction: only ``None``/``"mean"``.
        actor, critic: TorchRL's deprecated spellings of ``actor_network``/``critic_network``.
        entropy_coef, critic_coef: older spellings of ``entropy_coeff``/``critic_coeff``.
        **torchrl_only: TorchRL's ``normalize_advantage_exclude_dims``, ``advantage_norm``,
            ``separate_losses``, ``functional``, ``delay_actor``, ``delay_value``,
            ``max_importance_ratio``, ``device``, ``samples_mc_kl``: only at their defaults.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> from tdrl.modules.distributions import IndependentNormal
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor()),
        ...                      ["observation"], ["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
        ...                                   distribution_class=IndependentNormal))
        >>> batch = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...                     "action_log_prob": torch.zeros(8), "advantage": torch.randn(8, 1)},
        ...                    [8])
        >>> sorted(ClipPPOLoss(actor).forward(batch).keys())
        ['clip_fraction', 'entropy', 'kl_approx', 'loss_entropy', 'loss_objective']
    """

    def loss_critic(  # type: ignore[override]
        self, tensordict: TensorDictBase
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The critic's loss, as TorchRL's PPO ``loss_critic``.

        Args:
            tensordict: a batch holding the value target (run the value estimator first) and,
                with ``clip_value``, the collection-time value.

        Returns:
            ``(critic_coeff * distance(value, value_target), value_clip_fraction,
            explained_variance)``: the loss per element (``forward`` averages it), the
            fraction of clipped values (None without ``clip_value``) and the explained
            variance (None when ``log_explained_variance`` is off).

        Examples:
            >>> from tdrl.testing import (make_categorical_actor, make_state_value_net,
            ...     make_transition_batch)
            >>> loss = ClipPPOLoss(make_categorical_actor(), make_state_value_net())
            >>> batch = loss.value_estimator(make_transition_batch(batch=(2, 5), action="one_hot"))
            >>> value_loss, clip_fraction, explained = loss.loss_critic(batch)
            >>> value_loss.shape, clip_fraction, explained.shape
            (torch.Size([2, 5, 1]), None, torch.Size([]))
        """
        loss, clip_fraction, explained = self._critic_terms(tensordict)
        return loss, clip_fraction, explained if self._log_explained_variance else None

    def _ratio(self, td: TensorDictBase, log_prob: Tensor) -> tuple[Tensor, Tensor]:
        key = self.tensor_keys.sample_log_prob
        old = td.get(key, None)
        if old is None:
            raise KeyError(
                f"{type(self).__name__}.forward: the collection log-prob {key!r} is missing "
                f"(available keys: {sorted(map(str, td.keys(True, True)))}). Build the actor "
                "with return_log_prob=True, or set_keys(sample_log_prob=...)."
            )
        old = old.detach()
        while old.ndim < log_prob.ndim:
            old = old.unsqueeze(-1)
        diff = log_prob - old
        return diff.exp(), diff

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        ratio, diff = self._ratio(td, log_prob)
        return -(ratio * advantage).mean(), {"kl_approx": (-diff).mean()}


class ClipPPOLoss(PPOLoss):
    """PPO with the clipped surrogate ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]``.

    Args:
        actor_network: see :class:`PPOLoss`.
        critic_network: see :class:`PPOLoss`.
        clip_epsilon: the ratio clipping range.
        **kwargs: the options of :class:`PPOLoss`.

    Examples:
        >>> import torch
        >>> from tdrl.testing import make_categorical_actor, make_transition_batch
        >>> batch = make_transition_batch(batch=(8,), action="one_hot")
        >>> batch["action_log_prob"] = torch.full((8,), -0.7)
        >>> batch["advantage"] = torch.randn(8, 1)
        >>> out = ClipPPOLoss(make_categorical_actor(), clip_epsilon=0.1)(batch)
        >>> bool(out["loss_objective"].requires_grad)
        True
    """

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: TensorDictModule | None = None,
        *,
        clip_epsilon: float = 0.2,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        if clip_epsilon <= 0:
            raise ValueError(
                f"ClipPPOLoss.__init__: clip_epsilon must be > 0 (got {clip_epsilon})."
            )
        self.clip_epsilon = clip_epsilon

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        ratio, diff = self._ratio(td, log_prob)
        eps = self.clip_epsilon
        gain = torch.minimum(ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage)
        clipped = ((ratio - 1).abs() > eps).float().mean()
        return -gain.mean(), {"kl_approx": (-diff).mean(), "clip_fraction": clipped}


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty: ``-E[r A] + beta * KL(pi_old || pi)``.

    The KL divergence is estimated from the stored actions (sampled from ``pi_old``) as
    ``E[log pi_old(a) - log pi(a)]``. After each forward, ``beta`` grows by ``increment`` when
    the KL exceeds ``1.5 * dtarg`` and shrinks by ``decrement`` when it is under ``dtarg / 1.5``.

    Args:
        actor_network: see :class:`PPOLoss`.
        critic_network: see :class:`PPOLoss`.
        dtarg: the target KL.
        beta: the initial penalty weight.
        increment: factor applied to beta when the KL is too large.
        decrement: factor applied to beta when the KL is too small.
        **kwargs: the options of :class:`PPOLoss`.

    Examples:
        >>> import torch
        >>> from tdrl.testing import make_categorical_actor, make_transition_batch
        >>> batch = make_transition_batch(batch=(8,), action="one_hot")
        >>> batch["action_log_prob"] = torch.full((8,), -0.7)
        >>> batch["advantage"] = torch.randn(8, 1)
        >>> out = KLPENPPOLoss(make_categorical_actor(), dtarg=0.02)(batch)
        >>> bool(out["loss_objective"].requires_grad)
        True
    """

    beta: Tensor

    def __init__(
        self,
        actor_network: Any = None,
        critic_network: TensorDictModule | None = None,
        *,
        dtarg: float = 0.01,
        beta: float = 1.0,
        increment: float = 2.0,
        decrement: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        self.dtarg = dtarg
        self.increment = increment
        self.decrement = decrement
        self.register_buffer("beta", torch.tensor(float(beta)))

    def _objective(
        self,
        td: TensorDictBase,
        dist: distributions.Distribution,
        log_prob: Tensor,
        advantage: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        ratio, diff = self._ratio(td, log_prob)
        kl = (-diff).mean()
        beta = self.beta.clone()
        loss = -(ratio * advantage).mean() + beta * kl
        with torch.no_grad():
            # Branch-free (no host sync, no torch.compile graph break): grow beta while the KL
            # is above 1.5 * dtarg, shrink it below dtarg / 1.5, reset it to 1 if not finite.
            one = torch.ones_like(kl)
            shrink = torch.where(kl < self.dtarg / 1.5, self.decrement, one)
            self.beta.mul_(torch.where(kl > 1.5 * self.dtarg, self.increment, shrink))
            self.beta.copy_(torch.where(self.beta.isfinite(), self.beta, one))
        return loss, {"kl": kl, "beta": beta}
