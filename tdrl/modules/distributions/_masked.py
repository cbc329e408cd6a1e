"""Categorical distributions restricted to a set of allowed actions."""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor
from torch.distributions import Categorical
from torch.nn import functional as F

from tdrl.modules.distributions._discrete import OneHotCategorical
from tdrl.modules.distributions._reparam import ReparamGradientStrategy
from tdrl.modules.distributions._utils import _EMPTY_SHAPE, SampleShape, _check_params

__all__ = ["MaskedCategorical", "MaskedOneHotCategorical"]


def _dense_mask(
    mask: Tensor | None,
    indices: Tensor | None,
    num_classes: int,
    padding_value: int | None,
    owner: str,
) -> Tensor:
    if (mask is None) == (indices is None):
        raise ValueError(
            f"{owner}: exactly one of mask and indices must be given (got "
            f"mask={'None' if mask is None else 'a tensor'}, "
            f"indices={'None' if indices is None else 'a tensor'}; expected one tensor). Pass "
            "mask=<bool tensor, False = forbidden> or indices=<allowed indices, padded>."
        )
    if mask is not None:
        if mask.dtype is not torch.bool or mask.ndim < 1 or mask.shape[-1] != num_classes:
            raise ValueError(
                f"{owner}: mask must be a bool tensor whose last dimension is the number of "
                f"classes (got dtype={mask.dtype}, shape={tuple(mask.shape)}; expected "
                f"torch.bool and shape (*batch, {num_classes})). Build it with e.g. "
                "logits.new_ones(logits.shape, dtype=torch.bool)."
            )
        return mask
    if indices is None:  # unreachable, narrows the type
        raise ValueError(f"{owner}: indices must be given when mask is None.")
    if indices.is_floating_point() or indices.is_complex() or indices.ndim < 1:
        raise ValueError(
            f"{owner}: indices must be an integer tensor of shape (*batch, k) (got "
            f"dtype={indices.dtype}, shape={tuple(indices.shape)}; expected an integer dtype and "
            "at least one dimension). Pass e.g. torch.tensor([[0, 2, -1]])."
        )
    # No padding_value (TorchRL's default): every slot names an allowed class.
    used = (
        torch.ones_like(indices, dtype=torch.bool)
        if padding_value is None
        else (indices != padding_value)
    )
    if bool((used & ((indices < 0) | (indices >= num_classes))).any()):
        raise ValueError(
            f"{owner}: indices out of range (got {indices.tolist()}; expected values in "
            f"[0, {num_classes}) or padding_value={padding_value}). Fix the indices or pass the "
            "padding_value used to fill unused slots (e.g. padding_value=-1)."
        )
    # Unused slots are sent to an extra column, dropped after the scatter.
    target = torch.where(used, indices, num_classes).long()
    dense = torch.zeros(
        (*indices.shape[:-1], num_classes + 1), dtype=torch.bool, device=indices.device
    )
    return dense.scatter_(-1, target, True)[..., :num_classes]


def _masked_logits(
    logits: Tensor | None,
    probs: Tensor | None,
    mask: Tensor | None,
    indices: Tensor | None,
    neg_inf: float,
    padding_value: int | None,
    owner: str,
) -> tuple[Tensor, Tensor]:
    """Returns the logits with forbidden classes set to ``neg_inf``, and the dense mask."""
    _check_params(logits, probs, owner)
    if logits is None and probs is not None:
        logits = probs.log()
    if logits is None:
        raise ValueError(f"{owner}: logits or probs must be given (got neither). Pass logits=....")
    dense = _dense_mask(mask, indices, logits.shape[-1], padding_value, owner)
    shape = torch.broadcast_shapes(logits.shape, dense.shape)
    dense = dense.expand(shape)
    if not bool(dense.any(-1).all()):
        raise ValueError(
            f"{owner}: every row of the mask must allow at least one action (got "
            f"{int((~dense.any(-1)).sum())} row(s) with all actions masked; expected at least one "
            "True per row). Check the action mask produced by the environment."
        )
    return logits.expand(shape).masked_fill(~dense, neg_inf), dense


class MaskedCategorical(Categorical):
    """A categorical distribution over class indices, restricted to the allowed classes.

    The allowed classes are given by exactly one of:

    - ``mask``: a dense bool tensor broadcastable to the logits, ``True`` = allowed,
      ``False`` = forbidden;
    - ``indices``: an integer tensor ``(*batch, k)`` listing the allowed classes of each row;
      rows with fewer than ``k`` allowed classes fill their unused slots with
      ``padding_value`` (TorchRL's default ``None``: no slot is padding, every value must be a
      class). It is turned into a dense mask with a scatter.

    Forbidden classes have probability 0: sampling and ``mode`` never return them (even when
    their logits are huge), ``log_prob`` returns ``-inf`` for them, and ``entropy`` is the
    (finite) entropy of the distribution renormalised over the allowed classes. A row with
    no allowed class raises ``ValueError`` at construction (this check reads the mask back,
    one device synchronisation per construction).

    Args:
        logits: unnormalised log-probabilities, shape ``(*batch, n)``.
        probs: probabilities; give exactly one of ``logits`` and ``probs``.
        mask: dense bool mask, ``False`` = forbidden.
        indices: allowed class indices, padded with ``padding_value``.
        neg_inf: the value written in ``logits`` at forbidden classes. Whatever its value,
            forbidden classes are treated as having probability exactly 0.
        padding_value: the value of unused slots in ``indices`` (``None``: no padding). The
            :attr:`padding_value` attribute reads 0 when none was given, as in TorchRL.
        use_cross_entropy: compute ``log_prob`` with ``torch.nn.functional.cross_entropy``
            (``True``, TorchRL's default) or by gathering the normalised logits (``False``);
            both give the same values.
        padding_side: ``"left"`` or ``"right"``: the side on which padded sequences (of
            language-model tokens) were padded; kept as :attr:`padding_side` for the code that
            builds such masks, it does not change the distribution.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Raises:
        ValueError: bad ``mask``/``indices``, a row with no allowed class, or a
            ``padding_side`` other than ``"left"``/``"right"``.

    Examples:
        >>> import torch
        >>> logits = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
        >>> dist = MaskedCategorical(logits=logits, mask=torch.tensor([[False, True, True]]))
        >>> dist.mode
        tensor([1, 2])
        >>> dist.log_prob(torch.tensor([0, 0]))
        tensor([-inf, -inf])
        >>> sparse = MaskedCategorical(
        ...     logits=logits, indices=torch.tensor([[1, 2], [0, -1]]), padding_value=-1
        ... )
        >>> sparse.mask
        tensor([[False,  True,  True],
                [ True, False, False]])
    """

    def __init__(
        self,
        logits: Tensor | None = None,
        probs: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        indices: Tensor | None = None,
        neg_inf: float = -math.inf,
        padding_value: int | None = None,
        use_cross_entropy: bool = True,
        padding_side: str = "left",
        validate_args: bool = False,
    ) -> None:
        if padding_side not in ("left", "right"):
            raise ValueError(
                f"MaskedCategorical.__init__: unknown padding_side (got {padding_side!r};"
                " expected 'left' or 'right'). Pass padding_side='left'."
            )
        masked, dense = _masked_logits(
            logits, probs, mask, indices, neg_inf, padding_value, "MaskedCategorical.__init__"
        )
        self.use_cross_entropy = bool(use_cross_entropy)
        self._padding_side = padding_side
        self._setup(masked, dense, neg_inf, padding_value, validate_args)

    def _setup(
        self,
        logits: Tensor,
        mask: Tensor,
        neg_inf: float,
        padding_value: int | None,
        validate_args: bool,
    ) -> None:
        self._mask = mask
        self.neg_inf = neg_inf
        self._padding_value = padding_value
        super().__init__(logits=logits, validate_args=validate_args)

    @classmethod
    def _from_checked(
        cls,
        logits: Tensor,
        mask: Tensor,
        neg_inf: float,
        padding_value: int | None,
        validate_args: bool,
        use_cross_entropy: bool = True,
        padding_side: str = "left",
    ) -> MaskedCategorical:
        """Builds an instance from already-masked logits and a checked dense mask."""
        dist = cls.__new__(cls)
        dist.use_cross_entropy = use_cross_entropy
        dist._padding_side = padding_side
        dist._setup(logits, mask, neg_inf, padding_value, validate_args)
        return dist

    @property
    def padding_value(self) -> int:
        """The padding value of ``indices``; 0 when none was given (as in TorchRL)."""
        return 0 if self._padding_value is None else self._padding_value

    @property
    def padding_side(self) -> str:
        """The ``padding_side`` given at construction."""
        return self._padding_side

    @property
    def mask(self) -> Tensor:
        """The dense bool mask, ``True`` = allowed, shape ``(*batch, n)``."""
        return self._mask

    def sample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Draws allowed class indices, shape ``sample_shape + batch_shape``."""
        sample_shape = torch.Size(sample_shape)
        with torch.no_grad():
            probs = self.probs.masked_fill(~self._mask, 0.0)
            shape = sample_shape + probs.shape
            # Exponential race (argmax of p / E, E ~ Exp(1)): class k wins with probability
            # p_k, and forbidden classes (p = 0) never win; cheaper than torch.multinomial.
            race = torch.empty(shape, dtype=probs.dtype, device=probs.device).exponential_()
            return (probs.expand(shape) / race).argmax(-1)

    def log_prob(self, value: Tensor) -> Tensor:
        """Log-probability of class indices; ``-inf`` for forbidden classes."""
        if self._validate_args:
            self._validate_sample(value)
        index = value.long().unsqueeze(-1)
        index, logits = torch.broadcast_tensors(index, self.logits)
        index = index[..., :1]
        allowed = self._mask.expand_as(logits).gather(-1, index).squeeze(-1)
        if self.use_cross_entropy:
            rows = logits.reshape(-1, logits.shape[-1])
            nll = F.cross_entropy(rows, index.reshape(-1), reduction="none")
            lp = -nll.view(allowed.shape)
        else:
            lp = logits.gather(-1, index).squeeze(-1)
        return torch.where(allowed, lp, -math.inf)

    def entropy(self) -> Tensor:
        """Entropy over the allowed classes (finite, no ``0 * -inf``)."""
        safe_logits = torch.where(self._mask, self.logits, 0.0)
        return -torch.where(self._mask, self.probs * safe_logits, 0.0).sum(-1)

    @property
    def mode(self) -> Tensor:
        """The most likely allowed class."""
        return self.logits.masked_fill(~self._mask, -math.inf).argmax(-1)

    @property
    def deterministic_sample(self) -> Tensor:
        """Same as :attr:`mode`; used by ``tensordict.nn`` for ``InteractionType.DETERMINISTIC``."""
        return self.mode

    def expand(self, batch_shape: SampleShape, _instance=None) -> MaskedCategorical:
        """Returns the distribution with its batch dimensions expanded to ``batch_shape``."""
        shape = torch.Size(batch_shape) + self.param_shape[-1:]
        return MaskedCategorical._from_checked(
            self.logits.expand(shape),
            self._mask.expand(shape),
            self.neg_inf,
            self._padding_value,
            bool(self._validate_args),
            self.use_cross_entropy,
            self._padding_side,
        )


class MaskedOneHotCategorical(OneHotCategorical):
    """A :class:`OneHotCategorical` restricted to the allowed classes.

    Takes the mask like :class:`MaskedCategorical` (exactly one of ``mask`` or ``indices``)
    and has its guarantees: forbidden classes never appear in ``sample``, ``rsample`` or
    ``mode``, their ``log_prob`` is ``-inf`` and ``entropy`` counts allowed classes only.
    ``rsample`` returns exactly one-hot vectors whose gradient follows ``grad_method`` (see
    :class:`ReparamGradientStrategy`); forbidden classes get no gradient.

    Args:
        logits: unnormalised log-probabilities, shape ``(*batch, n)``.
        probs: probabilities; give exactly one of ``logits`` and ``probs``.
        mask: dense bool mask, ``False`` = forbidden.
        indices: allowed class indices, padded with ``padding_value``.
        neg_inf: the value written in ``logits`` at forbidden classes.
        padding_value: the value of unused slots in ``indices`` (``None``: no padding).
        grad_method: a :class:`ReparamGradientStrategy` or its name.
        temperature: the Gumbel-softmax temperature of ``RelaxedOneHot`` (positive, settable).
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Examples:
        >>> import torch
        >>> logits = torch.tensor([9.0, 0.0, 1.0], requires_grad=True)
        >>> dist = MaskedOneHotCategorical(
        ...     logits=logits, mask=torch.tensor([False, True, True]), grad_method="RelaxedOneHot"
        ... )
        >>> dist.mode
        tensor([0, 0, 1])
        >>> action = dist.rsample((4,))
        >>> bool((action[:, 0] == 0).all()), action.sum(-1).tolist()
        (True, [1.0, 1.0, 1.0, 1.0])
    """

    def __init__(
        self,
        logits: Tensor | None = None,
        probs: Tensor | None = None,
        mask: Tensor | None = None,
        indices: Tensor | None = None,
        neg_inf: float = -math.inf,
        padding_value: int | None = None,
        grad_method: ReparamGradientStrategy | str = ReparamGradientStrategy.PassThrough,
        *,
        temperature: float = 1.0,
        validate_args: bool = False,
    ) -> None:
        masked, dense = _masked_logits(
            logits, probs, mask, indices, neg_inf, padding_value, "MaskedOneHotCategorical.__init__"
        )
        categorical = MaskedCategorical._from_checked(
            masked, dense, neg_inf, padding_value, validate_args
        )
        self._setup(categorical, grad_method, temperature, validate_args)

    @property
    def mask(self) -> Tensor:
        """The dense bool mask, ``True`` = allowed, shape ``(*batch, n)``."""
        return self._allowed()

    def _allowed(self) -> Tensor:
        return cast(MaskedCategorical, self._categorical).mask

    def _sampling_probs(self) -> Tensor:
        return self.probs.masked_fill(~self._allowed(), 0.0)

    def expand(self, batch_shape: SampleShape, _instance=None) -> MaskedOneHotCategorical:
        """Returns the distribution with its batch dimensions expanded to ``batch_shape``."""
        new = MaskedOneHotCategorical.__new__(MaskedOneHotCategorical)
        new._setup(
            self._categorical.expand(batch_shape),
            self.grad_method,
            self.temperature,
            bool(self._validate_args),
        )
        return new
