"""Diagonal Gaussian whose last dimension is the event (action) dimension."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.distributions import Independent, Normal, constraints

from tdrl.modules.distributions._utils import SampleShape

__all__ = ["IndependentNormal"]


class IndependentNormal(Independent):
    """A Normal distribution whose last ``event_dim`` dimensions are one event (an action).

    ``log_prob`` and ``entropy`` sum over the event dimensions (by default the last one), so a
    ``(*batch, n)`` action gets a ``(*batch,)`` log-probability. ``mode``, ``mean`` and ``deterministic_sample`` are the
    location.

    Args:
        loc: the mean, shape ``(*batch, n)``.
        scale: the standard deviation, positive, broadcastable to ``loc``: a tensor, a number,
            or a function of ``loc`` (e.g. ``torch.ones_like``).
        upscale: the bound of the location when ``tanh_loc`` is true.
        tanh_loc: if true, the location is ``upscale * tanh(loc / upscale)``, which keeps an
            unbounded network output within ``(-upscale, upscale)``.
        event_dim: the number of trailing dimensions that make one event.
        validate_args: check the arguments and the values given to ``log_prob`` (slower).

    Examples:
        >>> import torch
        >>> dist = IndependentNormal(torch.zeros(2, 3), torch.ones(2, 3))
        >>> dist.batch_shape, dist.event_shape
        (torch.Size([2]), torch.Size([3]))
        >>> dist.log_prob(torch.zeros(2, 3)).shape
        torch.Size([2])
        >>> dist.deterministic_sample
        tensor([[0., 0., 0.],
                [0., 0., 0.]])
        >>> IndependentNormal(torch.zeros(2, 3), torch.ones_like, event_dim=2).log_prob(
        ...     torch.zeros(2, 3)).shape
        torch.Size([])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}

    def __init__(
        self,
        loc: Tensor,
        scale: Tensor | float | Callable[[Tensor], Tensor],
        upscale: float = 5.0,
        tanh_loc: bool = False,
        event_dim: int = 1,
        *,
        validate_args: bool = False,
    ) -> None:
        if tanh_loc:
            loc = upscale * torch.tanh(loc / upscale)
        if callable(scale) and not isinstance(scale, Tensor):
            scale = scale(loc)
        elif not isinstance(scale, Tensor):
            scale = torch.as_tensor(scale, device=loc.device, dtype=loc.dtype)
        shape = torch.broadcast_shapes(loc.shape, scale.shape)
        if not 1 <= int(event_dim) <= len(shape):
            raise ValueError(
                f"IndependentNormal.__init__: event_dim is out of range (got {event_dim!r} for"
                f" parameters of shape {tuple(shape)}; expected 1 <= event_dim <= {len(shape)})."
                " Pass the number of trailing event dims (loc needs at least one dimension)."
            )
        self.upscale = upscale
        self.tanh_loc = tanh_loc
        super().__init__(
            Normal(loc, scale, validate_args=validate_args),
            int(event_dim),
            validate_args=validate_args,
        )

    @property
    def loc(self) -> Tensor:
        """The location (after the optional ``tanh_loc`` squashing)."""
        return self.base_dist.loc

    @property
    def scale(self) -> Tensor:
        """The standard deviation."""
        return self.base_dist.scale

    @property
    def mode(self) -> Tensor:
        """The location."""
        return self.base_dist.loc

    @property
    def deterministic_sample(self) -> Tensor:
        """The location, used by ``tensordict.nn`` for ``InteractionType.DETERMINISTIC``."""
        return self.base_dist.loc

    def expand(self, batch_shape: SampleShape, _instance=None) -> IndependentNormal:
        """Returns the distribution with its batch dimensions expanded to ``batch_shape``."""
        shape = torch.Size(batch_shape) + self.event_shape
        return IndependentNormal(
            self.loc.expand(shape),
            self.scale.expand(shape),
            event_dim=len(self.event_shape),
            validate_args=bool(self._validate_args),
        )
