"""DTLoss and OnlineDTLoss: the (online) Decision Transformer's action losses."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

from tdrl.objectives._base import LossModule
from tdrl.objectives._mask import REDUCTIONS as _REDUCTIONS
from tdrl.objectives._mask import reduce_loss
from tdrl.objectives._policy_gradient import distance_loss
from tdrl.objectives._utils import check_loss_function, get_entry

__all__ = ["DTLoss", "OnlineDTLoss"]


def _check_reduction(reduction: str | None, where: str) -> str:
    reduction = "mean" if reduction is None else reduction
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"{where}: unknown reduction {reduction!r} (expected one of {list(_REDUCTIONS)} or "
            "None for 'mean')."
        )
    return reduction


class DTLoss(LossModule):
    """Decision Transformer loss: a distance between predicted and dataset actions.

    The actor (e.g. a :class:`~tdrl.modules.ProbabilisticActor` over a
    :class:`~tdrl.modules.DTActor` with a ``TanhDelta`` distribution) reads context windows
    and writes its action at ``action_pred``; the loss compares it with the dataset's action
    read at ``action_target`` before the actor runs (both ``"action"`` by default, as in
    TorchRL). ``"loss"`` is the element-wise distance reduced over every element (batch, time
    and action dims); the validity masks ``("collector", "mask")`` and ``"shifted_valid"``
    leave padded steps out when the batch holds them.

    Args:
        actor_network: the actor (writes ``action_pred``).
        loss_function: ``"l2"`` (squared error, TorchRL's default), ``"l1"`` or
            ``"smooth_l1"``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (the element-wise loss).
        device: TorchRL's argument; the loss follows its networks' device.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import DTActor
        >>> config = DTActor.default_config()
        >>> config.n_embd, config.n_inner = 32, 64
        >>> actor = TensorDictModule(DTActor(4, 2, config),
        ...     in_keys=["observation", "action", "return_to_go"], out_keys=["action"])
        >>> batch = TensorDict(observation=torch.randn(8, 10, 4), action=torch.rand(8, 10, 2),
        ...     return_to_go=torch.randn(8, 10, 1), batch_size=[8, 10])
        >>> out = DTLoss(actor)(batch)
        >>> out["loss"].backward()
        >>> list(out.keys()), out["loss"].shape
        (['loss'], torch.Size([]))
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """``action_target``: the dataset's action; ``action_pred``: the actor's output."""

        action_target: NestedKey = "action"
        action_pred: NestedKey = "action"

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        reduction: str | None = None,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.actor_network = actor_network
        self.loss_function = check_loss_function(loss_function, "DTLoss.__init__")
        self.reduction = _check_reduction(reduction, "DTLoss.__init__")
        if device is not None:
            self.to(device)

    @property
    def in_keys(self) -> list[NestedKey]:
        """The actor's inputs and the two action keys (TorchRL's list)."""
        keys = {*self.actor_network.in_keys, self.tensor_keys.action_pred}
        keys.add(self.tensor_keys.action_target)
        return sorted(keys, key=str)

    @property
    def out_keys(self) -> list[str]:
        """``["loss"]``."""
        return ["loss"]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``{"loss": distance(actor's action, dataset action)}`` reduced."""
        where = "DTLoss.forward"
        target = get_entry(tensordict, self.tensor_keys.action_target, where).detach()
        acted = self.actor_network(tensordict.copy())
        pred = get_entry(acted, self.tensor_keys.action_pred, where)
        loss = distance_loss(pred, target, self.loss_function)
        return TensorDict({"loss": reduce_loss(self, loss, tensordict, self.reduction)}, [])


class OnlineDTLoss(LossModule):
    """Online Decision Transformer loss: likelihood of the dataset actions plus entropy.

    The actor is probabilistic (``get_dist``, e.g. an :class:`~tdrl.modules.OnlineDTActor`
    with ``TanhNormal``). As TorchRL's:

    - ``loss_log_likelihood``: ``-log pi(a | context)`` of the dataset actions;
    - ``loss_entropy``: ``-alpha * H``, with the entropy ``H`` estimated from
      ``samples_mc_entropy`` reparameterised draws (``-mean log pi(a')``);
    - ``loss_alpha``: ``alpha * (H - target_entropy)`` (``H`` detached; ``alpha`` is
      ``exp(log_alpha)``, trained unless ``fixed_alpha``);
    - diagnostics ``"alpha"`` and ``"entropy"`` (their batch mean).

    Terms are reduced with ``reduction`` (validity masks as :class:`DTLoss`). With
    ``reduction="none"`` the terms keep the batch shape and ``alpha``/``entropy`` are left out
    (``scalar_output_mode="exclude"``, TorchRL's choice when it is None) or stored as
    non-tensor entries (``"non_tensor"``).

    Args:
        actor_network: the probabilistic actor.
        alpha_init: initial temperature.
        min_alpha, max_alpha: bounds of the temperature (``log_alpha`` is clamped into them
            when ``alpha`` is read; one bound alone gets the other at 0 / 1e9, as TorchRL).
        fixed_alpha: keep ``alpha`` constant (``log_alpha`` is then a buffer).
        target_entropy: a float, or ``"auto"``: ``-(number of action elements)`` read from the
            actor's ``spec`` at ``action_pred``.
        samples_mc_entropy: draws of the entropy estimate.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        scalar_output_mode: ``None``/``"exclude"`` or ``"non_tensor"`` (see above).

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.modules import OnlineDTActor, ProbabilisticActor, TanhNormal
        >>> from tdrl.specs import Bounded
        >>> config = OnlineDTActor.default_config()
        >>> config.n_embd, config.n_inner = 32, 64
        >>> net = TensorDictModule(OnlineDTActor(4, 2, config),
        ...     in_keys=["observation", "action", "return_to_go"], out_keys=["loc", "scale"])
        >>> actor = ProbabilisticActor(net, in_keys=["loc", "scale"], spec=Bounded(-1, 1, (2,)),
        ...     distribution_class=TanhNormal)
        >>> loss = OnlineDTLoss(actor)
        >>> batch = TensorDict(observation=torch.randn(8, 10, 4),
        ...     action=torch.rand(8, 10, 2) * 1.8 - 0.9, return_to_go=torch.randn(8, 10, 1),
        ...     batch_size=[8, 10])
        >>> out = loss(batch)
        >>> (out["loss_log_likelihood"] + out["loss_entropy"] + out["loss_alpha"]).backward()
        >>> sorted(out.keys())
        ['alpha', 'entropy', 'loss_alpha', 'loss_entropy', 'loss_log_likelihood']
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """``action_target``: the dataset's action; ``action_pred``: the actor's action
        (its spec gives the ``"auto"`` target entropy)."""

        action_target: NestedKey = "action"
        action_pred: NestedKey = "action"

    log_alpha: Tensor

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        samples_mc_entropy: int = 1,
        reduction: str | None = None,
        scalar_output_mode: str | None = None,
    ) -> None:
        where = "OnlineDTLoss.__init__"
        super().__init__()
        self.actor_network = actor_network
        self.reduction = _check_reduction(reduction, where)
        if scalar_output_mode not in (None, "exclude", "non_tensor"):
            raise ValueError(
                f"{where}: unknown scalar_output_mode {scalar_output_mode!r} (expected None, "
                "'exclude' or 'non_tensor')."
            )
        self.scalar_output_mode = scalar_output_mode
        if int(samples_mc_entropy) < 1:
            raise ValueError(
                f"{where}: samples_mc_entropy must be >= 1 (got {samples_mc_entropy})."
            )
        self.samples_mc_entropy = int(samples_mc_entropy)
        device = next((p.device for p in actor_network.parameters()), torch.device("cpu"))
        self._init_alpha(alpha_init, min_alpha, max_alpha, fixed_alpha, device, where)
        if target_entropy == "auto":
            target_entropy = self._auto_target_entropy(where)
        self.register_buffer("target_entropy", torch.tensor(float(target_entropy), device=device))

    def _init_alpha(
        self,
        alpha_init: float,
        min_alpha: float | None,
        max_alpha: float | None,
        fixed_alpha: bool,
        device: torch.device,
        where: str,
    ) -> None:
        self.register_buffer("alpha_init", torch.tensor(alpha_init, device=device))
        if bool(min_alpha) ^ bool(max_alpha):  # TorchRL: one bound alone gets the other
            min_alpha = min_alpha if min_alpha else 0.0
            if max_alpha == 0:
                raise ValueError(f"{where}: max_alpha must be None or > 0 (got 0).")
            max_alpha = max_alpha if max_alpha else 1e9
        self.min_log_alpha = math.log(min_alpha) if min_alpha else None
        self.max_log_alpha = math.log(max_alpha) if max_alpha else None
        self.fixed_alpha = fixed_alpha
        value = torch.tensor(math.log(alpha_init), device=device)
        if fixed_alpha:
            self.register_buffer("log_alpha", value)
        else:
            self.log_alpha = nn.Parameter(value)

    def _auto_target_entropy(self, where: str) -> float:
        spec = getattr(self.actor_network, "spec", None)
        key = self.tensor_keys.action_pred
        leaf = None if spec is None else spec.get(key, None)
        if spec is None or leaf is None:
            raise RuntimeError(
                f"{where}: cannot infer the target entropy (got an actor without a spec at "
                f"{key!r}; expected target_entropy='auto' to read the action's spec). Pass "
                "target_entropy=<float> or give the actor a spec."
            )
        container = spec if isinstance(key, str) else spec[key[:-1]]
        return -float(leaf.shape[len(container.shape) :].numel())

    @property
    def alpha(self) -> Tensor:
        """The detached temperature; ``log_alpha`` is first clamped into its bounds."""
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            self.log_alpha.data.clamp_(self.min_log_alpha, self.max_log_alpha)
        with torch.no_grad():
            return self.log_alpha.exp()

    @property
    def in_keys(self) -> list[NestedKey]:
        """The actor's inputs and the dataset action key."""
        return sorted({*self.actor_network.in_keys, self.tensor_keys.action_target}, key=str)

    @property
    def out_keys(self) -> list[str]:
        """TorchRL's output keys."""
        return ["loss_log_likelihood", "loss_entropy", "loss_alpha", "alpha", "entropy"]

    def get_entropy_bonus(self, dist: torch.distributions.Distribution) -> Tensor:
        """The entropy estimate ``-mean log pi(a')`` over ``samples_mc_entropy`` draws."""
        shape = torch.Size((self.samples_mc_entropy,))
        if hasattr(dist, "rsample_and_log_prob"):
            _, log_p = dist.rsample_and_log_prob(shape)
        else:
            log_p = dist.log_prob(dist.rsample(shape))
        return -log_p.mean(0)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The three loss terms (reduced) and the ``alpha``/``entropy`` diagnostics."""
        target = get_entry(tensordict, self.tensor_keys.action_target, "OnlineDTLoss.forward")
        if target.requires_grad:
            raise RuntimeError(
                "OnlineDTLoss.forward: the target action is part of a graph (got "
                "requires_grad=True; expected dataset actions). Detach it."
            )
        dist = self.actor_network.get_dist(tensordict.copy())  # type: ignore[operator]
        log_likelihood = dist.log_prob(target)
        entropy = self.get_entropy_bonus(dist)
        alpha = self.alpha
        terms = {
            "loss_log_likelihood": -log_likelihood,
            "loss_entropy": -alpha * entropy,
            "loss_alpha": self.log_alpha.exp() * (entropy - self.target_entropy).detach(),
        }
        if self.reduction == "none":
            out = TensorDict(terms, batch_size=tensordict.batch_size)
            if self.scalar_output_mode == "non_tensor":
                out.set_non_tensor("alpha", alpha)
                out.set_non_tensor("entropy", entropy.detach().mean())
            return out
        reduced: dict[str, Any] = {
            k: reduce_loss(self, v, tensordict, self.reduction) for k, v in terms.items()
        }
        reduced["entropy"] = entropy.detach().mean()
        reduced["alpha"] = alpha
        return TensorDict(reduced, [])
