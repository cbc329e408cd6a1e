"""BCLoss: behaviour cloning of a dataset's actions (deterministic or stochastic policies)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl.objectives._actor_plan import policy_dist_acted
from tdrl.objectives._base import LossModule
from tdrl.objectives._mask import expand_mask, valid_mask
from tdrl.objectives._policy_gradient import distance_loss
from tdrl.objectives._utils import acted, get_entry, plain_layers

__all__ = ["BCLoss"]

_NAMED = ("l1", "l2", "mse", "smooth_l1", "cross_entropy")
_REDUCTIONS = ("mean", "sum", "none")
# TorchRL's test of a discrete (class index) expert action, and of a stochastic actor.
_INDEX_DTYPES = (torch.int32, torch.int64)
_DIST_KEYS = ("loc", "scale", "logits", "probs")

LossFunction = Callable[[Tensor, Tensor], Tensor]


class BCLoss(LossModule):
    """Behaviour cloning: the policy learns to take the batch's (expert) actions.

    What is minimised depends on ``loss_function`` and on the data, as in TorchRL 0.14.1:

    - ``loss_function`` given: a distance between the actor's action (written at the action
      key; a stochastic actor gives its deterministic action inside the loss) and the expert's:
      ``"l2"``/``"mse"`` (squared error), ``"l1"``, ``"smooth_l1"``, ``"cross_entropy"`` (the
      actor writes class logits at the action key, the expert action is a class index, with or
      without a trailing dim of size 1) or any callable ``f(prediction, expert)``.
    - ``None`` (default): cross-entropy when the expert action is an ``int32``/``int64``
      index; the negative log-likelihood ``-log pi(a | s)`` when the actor writes
      distribution parameters (one of its out keys is ``"loc"``, ``"scale"``, ``"logits"`` or
      ``"probs"``); the squared error otherwise.

    The per-element losses are then reduced with ``reduction``. With the ``pad_mask`` key set
    (e.g. chunked actions, ``set_keys(pad_mask="action_is_pad")``) and present in the batch,
    padded elements (``True``) are left out: the mean is over the unpadded elements (0 when
    every element is padded) and ``"none"`` returns the unpadded elements as a flat vector.
    A batch without that entry is not masked, as in TorchRL. As in TorchRL, the validity masks
    ``("collector", "mask")`` and ``"shifted_valid"`` are applied too when the batch holds
    them (``"none"`` then keeps the loss's shape, with zeros where invalid).

    As in TorchRL 0.14, an actor that writes ``"action"`` while the loss's action key is
    another one still works, with a ``FutureWarning``.

    Args:
        actor_network: the policy (a deterministic tensordict module, a
            ``ProbabilisticActor``, or a module writing logits for discrete actions).
        loss_function: see above; ``None`` (default) chooses from the data and the actor.
        reduction: ``"mean"`` (default when ``None``), ``"sum"`` or ``"none"``.

    Raises:
        ValueError: an unknown ``loss_function`` or ``reduction``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tdrl.testing import make_deterministic_actor
        >>> loss = BCLoss(make_deterministic_actor())
        >>> batch = TensorDict(observation=torch.randn(4, 3), action=torch.rand(4, 2),
        ...     batch_size=[4])
        >>> out = loss(batch)
        >>> out["loss_bc"].backward()
        >>> list(out.keys()), out["loss_bc"].shape
        (['loss_bc'], torch.Size([]))
    """

    @dataclasses.dataclass(frozen=True)
    class Keys:
        """Data keys: the expert action (also where the actor writes its own) and the
        optional padding mask (``None``: no masking)."""

        action: NestedKey = "action"
        pad_mask: NestedKey | None = None

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        *,
        loss_function: str | LossFunction | None = None,
        reduction: str | None = None,
    ) -> None:
        super().__init__()
        where = "BCLoss.__init__"
        if loss_function is not None and not callable(loss_function):
            if loss_function not in _NAMED:
                raise ValueError(
                    f"{where}: unknown loss_function (got {loss_function!r}; expected None, a "
                    f"callable or one of {list(_NAMED)}). Pass e.g. loss_function='l2'."
                )
        reduction = "mean" if reduction is None else reduction
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"{where}: unknown reduction (got {reduction!r}; expected None or one of "
                f"{list(_REDUCTIONS)}). Pass e.g. reduction='mean'."
            )
        self.actor_network = actor_network
        self.loss_function = loss_function
        self.reduction = reduction
        out_keys = getattr(actor_network, "out_keys", ())
        self._stochastic = any(k in out_keys for k in _DIST_KEYS)
        self._actor_layers = plain_layers(actor_network)

    def set_keys(self, **keys: NestedKey | None) -> BCLoss:
        """Changes the data keys (``action``, ``pad_mask``); ``pad_mask=None`` turns masking
        off. Returns the loss."""
        if "pad_mask" in keys and keys["pad_mask"] is None:
            self._keys = dataclasses.replace(self._keys, **{"pad_mask": None})
            keys = {k: v for k, v in keys.items() if k != "pad_mask"}
        super().set_keys(**keys)
        return self

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Computes ``"loss_bc"`` on a batch holding the actor's inputs and the expert action.

        Raises:
            KeyError: the batch lacks the action or an input of the actor.
            RuntimeError: the actor wrote no prediction at the action key, or the padding
                mask has more dims than the loss (a log-likelihood or cross-entropy loss).
            TypeError: the padding mask is not boolean.
        """
        where = "BCLoss.forward"
        expert = get_entry(tensordict, self.tensor_keys.action, where)
        if self.loss_function is None and expert.dtype not in _INDEX_DTYPES and self._stochastic:
            dist = policy_dist_acted(self.actor_network, tensordict)[0]
            loss = -dist.log_prob(expert)
        else:
            loss = self._distance(self._prediction(tensordict, expert, where), expert)
        return TensorDict({"loss_bc": self._reduce(loss, tensordict, where)})

    def _prediction(self, tensordict: TensorDictBase, expert: Tensor, where: str) -> Tensor:
        key = self.tensor_keys.action
        td, replace = acted(self.actor_network, self._actor_layers, tensordict, None, key)
        pred = replace.get(key)
        if pred is None:
            pred = td.get(key)
        if pred is not expert:
            return pred
        legacy = td.get("action", None)
        if legacy is not None and legacy is not tensordict.get("action", None):
            warnings.warn(
                f"{where}: the actor wrote its prediction at 'action' while the loss's action "
                f"key is {key!r}; reading it from 'action' will stop working with TorchRL "
                "0.16. Make the actor's out_keys match the loss's action key.",
                FutureWarning,
                stacklevel=3,
            )
            return legacy
        raise RuntimeError(
            f"{where}: the actor wrote no prediction at the action key {key!r} (got its "
            f"out_keys {list(getattr(self.actor_network, 'out_keys', []))}; expected the key "
            "among them). Make the actor write it or set_keys(action=...)."
        )

    def _distance(self, pred: Tensor, expert: Tensor) -> Tensor:
        fn: Any = self.loss_function
        if fn is None:
            fn = "cross_entropy" if expert.dtype in _INDEX_DTYPES else "l2"
        if callable(fn):
            return fn(pred, expert)
        if fn == "cross_entropy":
            # F.cross_entropy's value with the classes in the last dim, any batch shape.
            log_probs = torch.log_softmax(pred, -1)
            if expert.is_floating_point() and expert.shape == pred.shape:
                return -(expert * log_probs).sum(-1)  # class probabilities (e.g. one-hot)
            index = expert.squeeze(-1) if expert.ndim > 1 else expert
            return -log_probs.gather(-1, index.long().unsqueeze(-1)).squeeze(-1)
        return distance_loss(pred, expert, "l2" if fn == "mse" else fn)

    def _reduce(self, loss: Tensor, tensordict: TensorDictBase, where: str) -> Tensor:
        """TorchRL's reduction with the padding mask and the batch's validity masks."""
        mask = None
        pad_key = self.tensor_keys.pad_mask
        pad = None if pad_key is None else tensordict.get(pad_key, None)
        if pad is not None:
            if pad.dtype is not torch.bool:
                raise TypeError(
                    f"{where}: the padding mask {pad_key!r} is not boolean (got {pad.dtype}; "
                    "expected torch.bool, True = padded). Convert it with .bool()."
                )
            if pad.ndim > loss.ndim:
                raise RuntimeError(
                    f"{where}: the padding mask {pad_key!r} has more dims than the loss (got "
                    f"{tuple(pad.shape)} for a loss of shape {tuple(loss.shape)}; expected at "
                    "most as many). Masking elements needs an element-wise loss, e.g. "
                    "loss_function='l1'."
                )
            mask = expand_mask(~pad, loss, pad_key, where)
        valid = valid_mask(self, tensordict, loss)
        if valid is not None:
            mask = valid if mask is None else mask & valid
        if mask is None:
            if self.reduction == "mean":
                return loss.mean()
            return loss.sum() if self.reduction == "sum" else loss
        loss = torch.where(mask, loss, torch.zeros_like(loss))
        if self.reduction == "none":
            return loss[mask] if pad is not None else loss
        if self.reduction == "mean":
            return loss.sum() / mask.sum().clamp_min(1)
        return loss.sum()
