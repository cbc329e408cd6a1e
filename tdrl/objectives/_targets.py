"""Target-network updaters: explicit objects the training loop calls with ``.step()``."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from tdrl.objectives._base import LossModule

__all__ = ["HardUpdate", "SoftUpdate"]


class _TargetUpdater:
    def __init__(self, loss: LossModule) -> None:
        if not loss._targets:
            raise ValueError(
                f"{type(self).__name__}: {type(loss).__name__} has no target network (got none; "
                "expected a loss built with delay_* / target networks)."
            )
        self.loss = loss
        self._cached: list[tuple[TensorDictBase, TensorDictBase]] | None = None

    @property
    def _pairs(self) -> list[tuple[TensorDictBase, TensorDictBase]]:
        # Targets of lazy networks appear at the loss's first call: cache once all exist.
        if self._cached is not None:
            return self._cached
        pairs = [(live.data, target.data) for live, target in self.loss.target_pairs()]
        if not self.loss._pending_targets:
            self._cached = pairs
        return pairs

    @torch.no_grad()
    def init_(self) -> None:
        """Copies the live parameters into the targets."""
        for live, target in self._pairs:
            target.update_(live)


class SoftUpdate(_TargetUpdater):
    """Polyak averaging: ``target <- eps * target + (1 - eps) * live`` at every ``step()``.

    Give one of ``eps`` or ``tau = 1 - eps`` (as TorchRL); with neither, ``eps = 0.999``
    (TorchRL's deprecated default, i.e. ``tau = 0.001``).

    Args:
        loss_module: a loss with target networks.
        eps: the weight kept by the target, in [0, 1).
        tau: the weight of the live network, in (0, 1].

    Raises:
        ValueError: both ``eps`` and ``tau``, or a value out of range.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.objectives import DQNLoss
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(net, action_space="one_hot")
        >>> updater = SoftUpdate(loss, tau=0.5)
        >>> updater.step()
        >>> SoftUpdate(loss, eps=0.99).tau
        0.01...
    """

    def __init__(
        self, loss_module: LossModule, *, eps: float | None = None, tau: float | None = None
    ) -> None:
        if eps is not None and tau is not None:
            raise ValueError(
                f"SoftUpdate.__init__: eps and tau are exclusive (got eps={eps}, tau={tau}; "
                "expected one of them). Pass tau= (= 1 - eps) alone."
            )
        if tau is None:
            tau = 1.0 - (0.999 if eps is None else eps)
        if not 0.0 < tau <= 1.0:
            raise ValueError(
                f"SoftUpdate.__init__: tau must be in (0, 1] (got tau={tau}, eps={1 - tau}; "
                "expected 0 <= eps < 1). Pass e.g. tau=0.005."
            )
        super().__init__(loss_module)
        self.tau = tau
        self.eps = 1.0 - tau

    @torch.no_grad()
    def step(self) -> None:
        """Moves every target towards its live network."""
        for live, target in self._pairs:
            target.lerp_(live, self.tau)


class HardUpdate(_TargetUpdater):
    """Copies the live parameters into the targets every ``value_network_update_interval`` steps.

    Args:
        loss_module: a loss with target networks.
        value_network_update_interval: number of ``step()`` calls between copies.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.objectives import DQNLoss
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> updater = HardUpdate(DQNLoss(net, action_space="one_hot"), value_network_update_interval=2)
        >>> updater.step(); updater.step()
    """

    def __init__(
        self, loss_module: LossModule, *, value_network_update_interval: int = 1000
    ) -> None:
        if value_network_update_interval < 1:
            raise ValueError(
                "HardUpdate: value_network_update_interval must be >= 1 "
                f"(got {value_network_update_interval})."
            )
        super().__init__(loss_module)
        self.interval = value_network_update_interval
        self._count = 0

    @torch.no_grad()
    def step(self) -> None:
        """Counts a step and copies the parameters when the interval is reached."""
        self._count += 1
        if self._count % self.interval == 0:
            self.init_()
