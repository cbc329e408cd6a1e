"""PPO losses: the plain ratio objective, the clipped one and the KL-penalised one."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModule
from torch import Tensor, distributions

from tdrl.objectives._mask import masked_mean
from tdrl.objectives._policy_gradient import PolicyGradientLoss, _match

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]


class PPOLoss(PolicyGradientLoss):
    """PPO without clipping: ``-E[ratio * advantage]`` with ``ratio = pi(a|s) / pi_old(a|s)``.

    The batch must hold the log-probability the collecting policy gave to its actions
    (``"action_log_prob"`` by default: build the actor with ``return_log_prob=True``).
    Advantages are read from the batch, or computed with the loss's value estimator (GAE by
    default; ``make_value_estimator`` changes it) when missing.

    Output, as TorchRL's: ``"loss_objective"``, ``"kl_approx"`` (the mean of
    ``log pi_old(a) - log pi(a)``), with the entropy bonus ``"loss_entropy"`` and
    ``"entropy"``, with a critic ``"loss_critic"``, ``"explained_variance"`` (computed over the
    first batch dim: ``[1]`` for a flat batch of values) and, with ``clip_value``,
    ``"value_clip_fraction"``.

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
        normalize_advantage_exclude_dims: dims left out of the statistics (e.g. ``(-2,)``:
            each agent standardised on its own).
        clip_value: clip the critic's change around the stored value (None: off).
        gamma: the discount of the default value estimator (TorchRL's deprecated argument).
        advantage_key, value_target_key, value_key: TorchRL's shortcuts for ``set_keys``.
        reduction: only ``None``/``"mean"``.
        actor, critic: TorchRL's deprecated spellings of ``actor_network``/``critic_network``.
        entropy_coef, critic_coef: older spellings of ``entropy_coeff``/``critic_coeff``.
        **torchrl_only: TorchRL's ``normalize_advantage_exclude_dims`` (see above) and
            ``advantage_norm``, ``separate_losses``, ``functional``, ``delay_actor``,
            ``delay_value``, ``max_importance_ratio``, ``device``, ``samples_mc_kl``: only at
            their defaults.

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
        >>> sorted(ClipPPOLoss(actor).forward(batch).keys())  # doctest: +NORMALIZE_WHITESPACE
        ['ESS', 'clip_fraction', 'entropy', 'kl_approx', 'loss_entropy', 'loss_objective',
         'max_ratio', 'mean_ratio']
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
            >>> value_loss.shape, clip_fraction, explained.shape  # TorchRL's: over dim 0
            (torch.Size([2, 5, 1]), None, torch.Size([5, 1]))
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
        source: TensorDictBase,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        ratio, diff = self._ratio(td, log_prob)
        return -masked_mean(self, ratio * advantage, td), {"kl_approx": (-diff).mean()}


class ClipPPOLoss(PPOLoss):
    """PPO with the clipped surrogate ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]``.

    Besides :class:`PPOLoss`'s outputs it writes TorchRL's ``"clip_fraction"``, ``"ESS"``
    (the effective sample size of the ratios over the first batch dim, divided by its size),
    ``"max_ratio"`` and ``"mean_ratio"``.

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
        source: TensorDictBase,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        ratio, diff = self._ratio(td, log_prob)
        eps = self.clip_epsilon
        gain = torch.minimum(ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage)
        clipped = ((ratio - 1).abs() > eps).float().mean()
        with torch.no_grad():
            # TorchRL's diagnostics: the effective sample size of the ratios over the first
            # batch dim (divided by its size), and the ratios' max and mean.
            lw = diff.squeeze(-1) if diff.shape[-1:] == (1,) else diff
            ess = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / diff.shape[0]
        return -masked_mean(self, gain, td), {
            "kl_approx": (-diff).mean(),
            "clip_fraction": clipped,
            "ESS": ess,
            "max_ratio": ratio.max(),
            "mean_ratio": ratio.mean(),
        }


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty: ``-E[r A - beta * KL(pi_old || pi)]``.

    As in TorchRL, ``pi_old`` is rebuilt from the distribution parameters the batch holds
    (the actor's outputs at collection, e.g. ``"loc"``/``"scale"`` or ``"logits"``: keep them
    in the data), and the KL is computed per sample: in closed form when torch has one, else
    from ``samples_mc_kl`` draws of ``pi_old``. After each forward, ``beta`` grows by
    ``increment`` when the mean KL exceeds ``1.5 * dtarg`` and shrinks by ``decrement`` when
    it is under ``dtarg / 1.5``. The output holds ``"kl"`` (per sample) and ``"kl_approx"``
    (the mean of ``log pi_old(a) - log pi(a)`` over the stored actions), as TorchRL's.

    Args:
        actor_network: see :class:`PPOLoss`.
        critic_network: see :class:`PPOLoss`.
        dtarg: the target KL.
        beta: the initial penalty weight.
        increment: factor applied to beta when the KL is too large.
        decrement: factor applied to beta when the KL is too small.
        samples_mc_kl: draws of the Monte-Carlo KL estimate (when there is no closed form).
        **kwargs: the options of :class:`PPOLoss`.

    Raises:
        KeyError: (forward) the batch does not hold the collection-time distribution
            parameters.

    Examples:
        >>> import torch
        >>> from tdrl.testing import make_categorical_actor, make_transition_batch
        >>> actor = make_categorical_actor()
        >>> batch = actor(make_transition_batch(batch=(8,), action="one_hot"))  # writes logits
        >>> batch["action_log_prob"] = torch.full((8,), -0.7)
        >>> batch["advantage"] = torch.randn(8, 1)
        >>> out = KLPENPPOLoss(actor, dtarg=0.02)(batch)
        >>> bool(out["loss_objective"].requires_grad), out["kl"].shape
        (True, torch.Size([8, 1]))
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
        samples_mc_kl: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        if samples_mc_kl < 1:
            raise ValueError(
                f"KLPENPPOLoss.__init__: samples_mc_kl must be >= 1 (got {samples_mc_kl})."
            )
        self.samples_mc_kl = samples_mc_kl
        self._old_dist_keys = self._dist_param_keys()
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
        source: TensorDictBase,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        ratio, diff = self._ratio(td, log_prob)
        kl = _match(self._kl(source, td, advantage), advantage)
        beta = self.beta.clone()
        loss = -masked_mean(self, ratio * advantage - beta * kl, td)
        with torch.no_grad():
            # Branch-free (no host sync, no torch.compile graph break): grow beta while the
            # mean KL is above 1.5 * dtarg, shrink it below dtarg / 1.5 (TorchRL's rule), reset
            # it to 1 if not finite.
            mean_kl = kl.mean()
            one = torch.ones_like(mean_kl)
            shrink = torch.where(mean_kl < self.dtarg / 1.5, self.decrement, one)
            self.beta.mul_(torch.where(mean_kl > 1.5 * self.dtarg, self.increment, shrink))
            self.beta.copy_(torch.where(self.beta.isfinite(), self.beta, one))
        return loss, {"kl": kl, "kl_approx": (-diff).mean()}

    def _kl(self, source: TensorDictBase, td: TensorDictBase, advantage: Tensor) -> Tensor:
        """``KL(pi_old || pi)`` per sample, as TorchRL: ``pi_old`` is rebuilt from the
        distribution parameters the batch holds (the actor's outputs at collection); the
        closed form when torch has one, else a Monte-Carlo estimate from
        ``samples_mc_kl`` draws of ``pi_old``."""
        params = self._old_dist_keys
        if any(source.get(k, None) is None for k in params):
            raise KeyError(
                f"KLPENPPOLoss.forward: the collection-time distribution parameters are"
                f" missing (got keys {sorted(map(str, source.keys(True, True)))}; expected"
                f" {sorted(map(str, params))}). Keep the actor's outputs in the collected data."
            )
        previous = self.actor_network.build_dist_from_params(source)
        current = self.actor_network.get_dist(td)
        try:
            return torch.distributions.kl_divergence(previous, current)
        except NotImplementedError:
            shape = torch.Size((self.samples_mc_kl,))
            with torch.no_grad():
                if hasattr(previous, "rsample_and_log_prob"):
                    x, previous_lp = previous.rsample_and_log_prob(shape)
                else:
                    x = previous.sample(shape)
                    previous_lp = previous.log_prob(x)
            return (previous_lp - current.log_prob(x)).mean(0)

    def _dist_param_keys(self) -> list[Any]:
        for module in reversed(list(self.actor_network.modules())):
            if isinstance(module, ProbabilisticTensorDictModule):
                return list(module.in_keys)
        return []
