"""TD3BCLoss: TD3's critics with a behaviour-cloning actor (TD3+BC, offline RL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._policy_gradient import distance_loss
from tdrl.objectives._td3 import TD3Loss
from tdrl.objectives._utils import batch_mean, get_entry
from tdrl.objectives.value import ValueEstimators
from tdrl.specs import TensorSpec

__all__ = ["TD3BCLoss"]

# TorchRL's: the critics' targets need no value network, and no advantage (GAE) is defined.
_SUPPORTED = (ValueEstimators.TD0, ValueEstimators.TD1, ValueEstimators.TDLambda)


class TD3BCLoss(TD3Loss):
    """The TD3+BC loss (Fujimoto and Gu, 2021, "A Minimalist Approach to Offline RL").

    The critics learn exactly as :class:`~tdrl.objectives.TD3Loss`'s (clipped double-Q
    targets from the target actor's action plus clipped Gaussian noise, clamped to the action
    bounds; TD(0) by default, see :meth:`make_value_estimator`). The actor minimises
    ``-lmbd * Q_0(s, mu(s)) + mean((mu(s) - a)^2)`` where ``a`` is the batch's action, the
    squared error is averaged over every element of the batch, and
    ``lmbd = alpha / mean(|Q_0(s, mu(s))|)`` (detached) rescales the value term so that
    ``alpha`` balances it against the cloning term whatever the scale of the returns. As in
    TorchRL, the first critic scores the policy's action (its weights get no gradient from the
    actor loss), and delaying the actor's update is the caller's job: step the actor's
    optimiser (and the target updater) every ``policy_delay`` updates.

    Output, with TorchRL's keys: ``"loss_actor"``, ``"loss_qvalue"``, and detached
    diagnostics: ``"bc_loss"`` (the cloning term, a scalar, already inside ``loss_actor``),
    ``"lmbd"``, ``"state_action_value_actor"`` (the first critic's value of the policy's
    action per sample), ``"pred_value"`` (``[num_qvalue_nets, *batch]``), ``"target_value"``
    and ``"next_state_value"`` (per sample). ``"td_error"`` (the largest squared error among
    the critics, per sample) is written into the batch. Both losses are weighted by the
    batch's ``"priority_weight"`` when present (``use_prioritized_weights="auto"``).
    :meth:`actor_loss` and :meth:`qvalue_loss` compute each part alone (TorchRL's methods).

    Args:
        actor_network: the deterministic policy, writing the action key.
        qvalue_network: the critic, copied ``num_qvalue_nets`` times (or a list of critics
            of one architecture, used as given).
        action_spec: a ``Bounded`` action spec (or a Composite holding one) for the clamp of
            the target action; exactly one of ``action_spec`` and ``bounds`` (as TorchRL).
        bounds: ``(low, high)`` for the clamp, instead of ``action_spec``.
        num_qvalue_nets: the number of critics.
        policy_noise: std of the target policy smoothing noise.
        noise_clip: the noise is clipped to ``[-noise_clip, noise_clip]``.
        alpha: the weight of the value term against the cloning term (TorchRL's default 2.5).
        loss_function: the critics' distance: ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        delay_actor: use a target actor for the next action.
        delay_qvalue: use target critics for the next value.
        priority_key: the key the TD error is written to (default ``"td_error"``).
        separate_losses, deactivate_vmap: TorchRL's; only their defaults are accepted.
        reduction: only ``None``/``"mean"``.
        use_prioritized_weights: ``"auto"``/``True`` weight both losses by the batch's
            ``"priority_weight"`` when present; ``False`` never.

    Raises:
        ValueError: neither or both of ``action_spec`` and ``bounds``, a low bound above the
            high one, or any argument :class:`~tdrl.objectives.TD3Loss` refuses.

    Examples:
        >>> from tdrl.testing import (make_deterministic_actor, make_qvalue_critic,
        ...     make_transition_batch)
        >>> loss = TD3BCLoss(make_deterministic_actor(), make_qvalue_critic(), bounds=(-1.0, 1.0))
        >>> batch = make_transition_batch(batch=(4,))
        >>> out = loss(batch)
        >>> (out["loss_actor"] + out["loss_qvalue"]).backward()
        >>> out["bc_loss"].shape, out["state_action_value_actor"].shape, batch["td_error"].shape
        (torch.Size([]), torch.Size([4]), torch.Size([4]))
    """

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
        alpha: float = 2.5,
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
        deactivate_vmap: bool = False,
        use_prioritized_weights: str | bool = "auto",
    ) -> None:
        where = "TD3BCLoss.__init__"
        if (action_spec is None) == (bounds is None):
            raise ValueError(
                f"{where}: exactly one of action_spec and bounds is needed (got "
                f"action_spec={action_spec!r}, bounds={bounds!r}; expected one of them, as "
                "TorchRL). Pass bounds=(low, high) or the env's action spec."
            )
        if isinstance(alpha, bool) or not isinstance(alpha, int | float):
            raise TypeError(f"{where}: alpha must be a number (got {alpha!r}; expected e.g. 2.5).")
        super().__init__(
            actor_network,
            qvalue_network,
            action_spec=action_spec,
            bounds=bounds,
            num_qvalue_nets=num_qvalue_nets,
            policy_noise=policy_noise,
            noise_clip=noise_clip,
            loss_function=loss_function,
            delay_actor=delay_actor,
            delay_qvalue=delay_qvalue,
            priority_key=priority_key,
            separate_losses=separate_losses,
            reduction=reduction,
            deactivate_vmap=deactivate_vmap,
            use_prioritized_weights=use_prioritized_weights,
        )
        low, high = self.action_low, self.action_high
        if low is not None and high is not None and bool((low > high).any()):
            raise ValueError(
                f"{where}: a low bound is above its high bound (got low={low.tolist()}, "
                f"high={high.tolist()}; expected low <= high). Check the bounds."
            )
        self.alpha = float(alpha)

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> TD3BCLoss:
        """Builds the critics' target estimator: TD0 (default), TD1 or TDLambda, as TorchRL.

        Raises:
            NotImplementedError: another estimator (e.g. GAE), as TorchRL's.
        """
        kind = value_type
        if isinstance(kind, str) and kind in ValueEstimators.__members__:
            kind = ValueEstimators[kind]
        if kind is not None and kind not in _SUPPORTED:
            raise NotImplementedError(
                f"TD3BCLoss.make_value_estimator: unsupported estimator (got {value_type!r}; "
                f"expected one of {[v.name for v in _SUPPORTED]}). Pass e.g. "
                "ValueEstimators.TD0."
            )
        super().make_value_estimator(kind, **hyperparams)
        return self

    def qvalue_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' loss, as TorchRL's ``TD3BCLoss.qvalue_loss`` (TD3's, see
        :meth:`TD3Loss.value_loss <tdrl.objectives.TD3Loss.value_loss>`).

        Returns:
            ``(loss_qvalue, metadata)`` with ``"td_error"``, ``"next_state_value"``,
            ``"target_value"`` (per sample) and ``"pred_value"`` (``[num_qvalue_nets, *batch]``).
        """
        return self._value_loss(tensordict, "TD3BCLoss.qvalue_loss")

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's loss ``-lmbd * Q_0(s, mu(s)) + mean((mu(s) - a)^2)``, as TorchRL's.

        Returns:
            ``(loss_actor, metadata)`` with the detached ``"bc_loss"`` (scalar), ``"lmbd"``
            and ``"state_action_value_actor"`` (the first critic's value per sample).

        Raises:
            KeyError: the batch lacks the action or an input of the networks.
            RuntimeError: the actor did not write the action key.
        """
        where = "TD3BCLoss.actor_loss"
        keys = self.tensor_keys
        data_action = get_entry(tensordict, keys.action, where)
        td, replace = self._acted(tensordict, None)
        action = replace.get(keys.action)
        if action is None:
            action = td.get(keys.action)
        if action is data_action:
            raise RuntimeError(
                f"{where}: the actor did not write the action key {keys.action!r} (got its "
                f"out_keys {list(getattr(self.actor_network, 'out_keys', []))}; expected the "
                "loss's action key among them). Make the actor write it or set_keys(action=...)."
            )
        value = self.qvalue_network(
            td, out_key=keys.state_action_value, detach=True, member=0, replace=replace
        )
        bc_loss = distance_loss(action, data_action, "l2").mean()
        lmbd = self.alpha / value.detach().abs().mean()
        weight_key = keys.priority_weight if self.use_prioritized_weights else None
        loss = batch_mean(bc_loss - lmbd * value, tensordict, weight_key, self)
        metadata = {
            "state_action_value_actor": value.detach().squeeze(-1),
            "bc_loss": bc_loss.detach(),
            "lmbd": lmbd,
        }
        return loss, metadata

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``loss_actor`` then ``loss_qvalue`` (TorchRL's order) and the diagnostics."""
        loss_actor, actor_meta = self.actor_loss(tensordict)
        loss_qvalue, value_meta = self.qvalue_loss(tensordict)
        td_error = value_meta.pop("td_error")
        out = TensorDict(
            {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, **actor_meta, **value_meta}
        )
        out.set(self.tensor_keys.priority, td_error)
        return out
