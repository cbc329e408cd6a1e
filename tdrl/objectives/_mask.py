"""The validity masks every loss reduction honours (TorchRL's ``loss_mask_key``).

A batch may mark positions that must not count in a loss: ``("collector", "mask")`` (split
trajectories padded to the longest one: False = padding) and ``"shifted_valid"`` (value
estimators whose bootstrapped target crosses an episode boundary: False = invalid). As
TorchRL's losses, tdrl's reduce every ``loss_*`` term over the valid positions only (the masks
present are ANDed). ``LossModule.loss_mask_key`` chooses the entries: ``"auto"`` (those two),
one key, or ``None`` (no masking).

The common batch has no mask entry: :func:`valid_mask` then costs one dict look-up per head
key of a plain ``TensorDict`` (no call into tensordict).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey, unravel_key
from torch import Tensor

__all__ = ["AUTO_LOSS_MASK_KEYS"]

#: The entries ``loss_mask_key="auto"`` looks for (TorchRL's names).
AUTO_LOSS_MASK_KEYS: tuple[NestedKey, ...] = (("collector", "mask"), "shifted_valid")
_AUTO_HEADS: tuple[str, ...] = ("collector", "shifted_valid")
REDUCTIONS = ("mean", "sum", "none")


def resolve_mask_key(value: Any, where: str) -> tuple[Any, tuple[NestedKey, ...], tuple[str, ...]]:
    """``(setting, keys, heads)`` of a ``loss_mask_key`` value: the keys looked up and the
    top-level names that must be in a batch for any of them to be there.

    Raises:
        ValueError: ``value`` is neither ``"auto"``, ``None`` nor a nested key.
    """
    if value is None:
        return None, (), ()
    if isinstance(value, str) and value == "auto":
        return "auto", AUTO_LOSS_MASK_KEYS, _AUTO_HEADS
    if not _is_nested_key(value):
        raise ValueError(
            f"{where}: loss_mask_key is not a key (got {value!r}; expected 'auto', None or a "
            "NestedKey such as ('collector', 'mask')). Pass one of those; ('auto',) names an "
            "entry called 'auto'."
        )
    key = unravel_key(value)
    head = key if isinstance(key, str) else key[0]
    return value, (key,), (head,)


def _is_nested_key(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, tuple) and value:
        return all(_is_nested_key(v) for v in value)
    return False


def valid_mask(
    owner: Any, td: TensorDictBase, loss: Tensor, where: str = "forward"
) -> Tensor | None:
    """The boolean mask of ``loss``'s valid positions in ``td`` (None: every position).

    ``owner`` is the loss module (its ``_mask_keys``/``_mask_heads``). The masks present
    are broadcast to ``loss`` (trailing unit dims dropped, missing trailing dims added) and
    ANDed.
    """
    heads = owner._mask_heads
    if not heads:
        return None
    if type(td) is TensorDict:
        entries = td._tensordict
        for head in heads:
            if head in entries:
                break
        else:
            return None
    mask: Tensor | None = None
    for key in owner._mask_keys:
        entry = _lookup(td, key)
        if entry is None:
            continue
        entry = expand_mask(entry, loss, key, f"{type(owner).__name__}.{where}")
        mask = entry if mask is None else mask & entry
    return mask


def _lookup(td: TensorDictBase, key: NestedKey) -> Any:
    """``td.get(key, None)``; plain ``TensorDict`` levels read their entry dicts (a batch of
    collected data holds ``("collector", "traj_ids")`` without a mask: no tensordict call)."""
    node: Any = td
    for part in (key,) if isinstance(key, str) else key:
        if type(node) is not TensorDict:
            return td.get(key, None)
        node = node._tensordict.get(part)
        if node is None:
            return None
    return node


def expand_mask(mask: Tensor, loss: Tensor, key: Any, where: str) -> Tensor:
    """``mask`` broadcast to ``loss``: trailing unit dims dropped, missing trailing dims added.

    Raises:
        TypeError: ``mask`` is not a boolean tensor.
        ValueError: ``mask`` has more (non-unit) dims than ``loss`` or other sizes.
    """
    if not isinstance(mask, Tensor) or mask.dtype is not torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(
            f"{where}: the mask {key!r} is not a boolean tensor (got {got}; expected "
            "torch.bool, True = valid). Convert it with .bool() or set loss_mask_key."
        )
    while mask.ndim > loss.ndim and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if mask.ndim > loss.ndim or any(
        m not in (1, n) for m, n in zip(mask.shape, loss.shape, strict=False)
    ):
        raise ValueError(
            f"{where}: the mask {key!r} cannot be applied to the loss (got a mask of shape "
            f"{tuple(mask.shape)} for a loss of shape {tuple(loss.shape)}; expected the loss's "
            "leading dims, e.g. the batch shape). Masking needs an element-wise loss; select "
            "the valid samples before the loss or set loss_mask_key=None."
        )
    if mask.ndim < loss.ndim:
        mask = mask.reshape(*mask.shape, *(1,) * (loss.ndim - mask.ndim))
    return mask.expand_as(loss)


def _expand_weights(weights: Tensor, loss: Tensor) -> Tensor:
    weights = weights.to(loss.dtype)
    while weights.ndim > loss.ndim and weights.shape[-1] == 1:
        weights = weights.squeeze(-1)
    if weights.ndim < loss.ndim:
        weights = weights.reshape(*weights.shape, *(1,) * (loss.ndim - weights.ndim))
    return weights.expand_as(loss)


def masked_reduce(
    loss: Tensor, mask: Tensor, reduction: str = "mean", weights: Tensor | None = None
) -> Tensor:
    """``loss`` reduced over the positions where ``mask`` (its shape) is True.

    Masked positions are selected out with ``torch.where`` (a NaN there reaches neither the
    value nor the gradient). ``"mean"``: the sum over the valid positions divided by their
    count (at least 1), or by their summed ``weights``; ``"sum"``: the (weighted) sum;
    ``"none"``: ``loss``'s shape with zeros at the masked positions (times ``weights``).

    Examples:
        >>> loss = torch.tensor([1.0, float("nan"), 3.0])
        >>> masked_reduce(loss, torch.tensor([True, False, True]))
        tensor(2.)
    """
    loss = torch.where(mask, loss, torch.zeros_like(loss))
    if weights is not None:
        weights = _expand_weights(weights, loss)
        if reduction == "none":
            return loss * weights
        weights = torch.where(mask, weights, torch.zeros_like(weights))
        total = (loss * weights).sum()
        return total / weights.sum() if reduction == "mean" else total
    if reduction == "mean":
        return loss.sum() / mask.sum().clamp_min(1)
    return loss.sum() if reduction == "sum" else loss


def reduce_loss(
    owner: Any,
    loss: Tensor,
    td: TensorDictBase,
    reduction: str = "mean",
    weights: Tensor | None = None,
    where: str = "forward",
) -> Tensor:
    """``loss`` reduced as TorchRL's ``LossModule._reduce_loss``: over the valid positions of
    ``td``'s masks (see :func:`valid_mask`), weighted by ``weights`` when given."""
    mask = valid_mask(owner, td, loss, where)
    if mask is not None:
        return masked_reduce(loss, mask, reduction, weights)
    if weights is not None:
        weights = _expand_weights(weights, loss)
        if reduction == "none":
            return loss * weights
        total = (loss * weights).sum()
        return total / weights.sum() if reduction == "mean" else total
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def masked_mean(
    owner: Any, values: Tensor, td: TensorDictBase, unmasked: Tensor | None = None
) -> Tensor:
    """``values.mean()`` over the valid positions of ``td``'s masks (``owner``'s
    ``loss_mask_key``); a plain ``TensorDict`` without them costs no further call.
    ``unmasked``: ``values.mean()`` when the caller has it already (returned if no mask)."""
    heads = owner._mask_heads
    entries = td._tensordict if type(td) is TensorDict else heads
    for head in heads:
        if head in entries:
            mask = valid_mask(owner, td, values)
            if mask is not None:
                return masked_reduce(values, mask)
            break
    return values.mean() if unmasked is None else unmasked


def standardize_shifted(advantage: Tensor, valid: Tensor, exclude: tuple[int, ...]) -> Tensor:
    """``(advantage - mean) / std`` over the positions where ``valid`` (TorchRL's PPO with a
    ``"shifted_valid"`` entry): population std over the valid positions, clamped at 1e-4,
    statistics over every dim but ``exclude``."""
    while valid.ndim < advantage.ndim:
        valid = valid.unsqueeze(-1)
    weight = valid.expand_as(advantage).to(advantage.dtype)
    skip = {d % advantage.ndim for d in exclude}
    dims = [d for d in range(advantage.ndim) if d not in skip]
    count = weight.sum(dim=dims, keepdim=True).clamp_min(1)
    kept = torch.where(weight.bool(), advantage, torch.zeros_like(advantage))
    loc = kept.sum(dim=dims, keepdim=True) / count
    spread = torch.where(weight.bool(), (advantage - loc).square(), torch.zeros_like(advantage))
    scale = (spread.sum(dim=dims, keepdim=True) / count).sqrt().clamp_min(1e-4)
    return (advantage - loc) / scale
