"""One-hot categorical distribution with straight-through ``rsample``."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.distributions import Categorical
from torch.distributions import OneHotCategorical as _TorchOneHotCategorical

from tdrl.modules.distributions._reparam import (
    ReparamGradientStrategy,
    _check_temperature,
    _one_hot_rsample,
    _resolve_grad_method,
)
from tdrl.modules.distributions._utils import _EMPTY_SHAPE, SampleShape, _check_params

__all__ = ["OneHotCategorical"]


class OneHotCategorical(_TorchOneHotCategorical):
    """A categorical distribution over one-hot vectors, with a differentiable ``rsample``.

    As TorchRL's: ``sample`` draws one-hot ``torch.int64`` vectors (no gradient), and ``mode``
    and ``deterministic_sample`` are the int64 one-hot of the most likely class; ``rsample``
    draws exactly one-hot float vectors whose gradient reaches the logits through
    ``grad_method`` (see :class:`ReparamGradientStrategy`). ``mean`` is ``probs``.
    ``log_prob`` reads the class from the position of the largest entry of the last
    dimension (any dtype).

    Args:
        logits: unnormalised log-probabilities, shape ``(*batch, n)``.
        probs: probabilities (normalised over the last dimension); give exactly one of the two.
        grad_method: a :class:`ReparamGradientStrategy` or its name.
        temperature: the Gumbel-softmax temperature of ``RelaxedOneHot`` (positive); it can be
            changed later by setting the attribute.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Examples:
        >>> import torch
        >>> logits = torch.tensor([0.0, 3.0, 1.0], requires_grad=True)
        >>> dist = OneHotCategorical(logits=logits)
        >>> dist.mode
        tensor([0, 1, 0])
        >>> action = dist.rsample()
        >>> action.detach().sort().values
        tensor([0., 0., 1.])
        >>> (action * torch.arange(3.0)).sum().backward()
        >>> logits.grad is not None
        True
    """

    # As TorchRL's (a torch Categorical underneath): ``rsample`` exists but is not the default
    # draw, so a ProbabilisticActor samples int64 one-hot actions under RANDOM.
    has_rsample = False

    def __init__(
        self,
        logits: Tensor | None = None,
        probs: Tensor | None = None,
        grad_method: ReparamGradientStrategy | str = ReparamGradientStrategy.PassThrough,
        *,
        temperature: float = 1.0,
        validate_args: bool = False,
    ) -> None:
        _check_params(logits, probs, "OneHotCategorical.__init__")
        categorical = Categorical(probs=probs, logits=logits, validate_args=validate_args)
        self._setup(categorical, grad_method, temperature, validate_args)

    def _setup(
        self,
        categorical: Categorical,
        grad_method: ReparamGradientStrategy | str,
        temperature: float,
        validate_args: bool,
    ) -> None:
        self.grad_method = _resolve_grad_method(grad_method, f"{type(self).__name__}.__init__")
        self.temperature = temperature
        self._categorical = categorical
        # Skip torch's OneHotCategorical.__init__: it would build a second Categorical.
        torch.distributions.Distribution.__init__(
            self, categorical.batch_shape, categorical.param_shape[-1:], validate_args=validate_args
        )

    @property
    def temperature(self) -> float:
        """The Gumbel-softmax temperature used by ``RelaxedOneHot``."""
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = _check_temperature(value, f"{type(self).__name__}.temperature")

    @property
    def mode(self) -> Tensor:
        """One-hot (int64) of the most likely class."""
        return torch.nn.functional.one_hot(self._categorical.mode, self.event_shape[0])

    @property
    def deterministic_sample(self) -> Tensor:
        """Same as :attr:`mode`; used by ``tensordict.nn`` for ``InteractionType.DETERMINISTIC``."""
        return self.mode

    def _draw(self, sample_shape: torch.Size) -> Tensor:
        """Class indices by an exponential race: ``argmax(p / E)`` with ``E ~ Exp(1)``.

        It picks class ``k`` with probability ``p_k`` (the minimum of independent exponentials
        of rates ``p_i``) and is several times cheaper than ``torch.multinomial`` on small
        batches, which matters when a policy samples at every env step.
        """
        probs = self._sampling_probs()
        shape = sample_shape + probs.shape
        race = torch.empty(shape, dtype=probs.dtype, device=probs.device).exponential_()
        return (probs.expand(shape) / race).argmax(-1)

    def sample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Draws int64 one-hot samples (no gradient)."""
        with torch.no_grad():
            index = self._draw(torch.Size(sample_shape))
            return torch.nn.functional.one_hot(index, self.event_shape[0])

    def rsample(self, sample_shape: SampleShape = _EMPTY_SHAPE) -> Tensor:
        """Draws exactly one-hot samples differentiable through ``grad_method``."""
        sample_shape = torch.Size(sample_shape)
        if not (torch.is_grad_enabled() and self.logits.requires_grad):
            # Nothing to differentiate: skip the relaxation (floats, as a relaxed sample).
            return self.sample(sample_shape).to(self.probs.dtype)
        draw = None
        if self.grad_method is ReparamGradientStrategy.PassThrough:
            draw = self._draw(sample_shape)
        return _one_hot_rsample(
            self.logits,
            self.probs,
            self._allowed(),
            draw,
            self.grad_method,
            self.temperature,
            sample_shape,
        )

    def _allowed(self) -> Tensor:
        """Classes that ``rsample`` may return: those with a non-zero probability."""
        return self.probs > 0

    def _sampling_probs(self) -> Tensor:
        """The probabilities samples are drawn from (masked subclasses zero forbidden ones)."""
        return self.probs

    def expand(self, batch_shape: SampleShape, _instance=None) -> OneHotCategorical:
        """Returns the distribution with its batch dimensions expanded to ``batch_shape``."""
        shape = torch.Size(batch_shape) + self.event_shape
        return OneHotCategorical(
            logits=self.logits.expand(shape),
            grad_method=self.grad_method,
            temperature=self.temperature,
            validate_args=bool(self._validate_args),
        )
