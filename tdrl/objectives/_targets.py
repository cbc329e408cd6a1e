"""Target-network updaters: explicit objects the training loop calls with ``.step()``."""

from __future__ import annotations

import torch

from tdrl.objectives._base import LossModule

__all__ = ["HardUpdate", "SoftUpdate"]


class _TargetUpdater:
    def __init__(self, loss: LossModule) -> None:
        pairs = list(loss.target_pairs())
        if not pairs:
            raise ValueError(
                f"{type(self).__name__}: {type(loss).__name__} has no target network (got none; "
                "expected a loss built with delay_* / target networks)."
            )
        self.loss = loss
        self._pairs = [(live.data, target.data) for live, target in pairs]

    @torch.no_grad()
    def init_(self) -> None:
        """Copies the live parameters into the targets."""
        for live, target in self._pairs:
            target.update_(live)


class SoftUpdate(_TargetUpdater):
    """Polyak averaging: ``target <- (1 - tau) * target + tau * live`` at every ``step()``.

    Args:
        loss: a loss with target networks.
        tau: the interpolation weight in (0, 1].

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.objectives import DQNLoss
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(net, action_space="one_hot")
        >>> updater = SoftUpdate(loss, tau=0.5)
        >>> updater.step()
    """

    def __init__(self, loss: LossModule, *, tau: float = 0.005) -> None:
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"SoftUpdate: tau must be in (0, 1] (got {tau}).")
        super().__init__(loss)
        self.tau = tau

    @torch.no_grad()
    def step(self) -> None:
        """Moves every target towards its live network."""
        for live, target in self._pairs:
            target.lerp_(live, self.tau)


class HardUpdate(_TargetUpdater):
    """Copies the live parameters into the targets every ``value_network_update_interval`` steps.

    Args:
        loss: a loss with target networks.
        value_network_update_interval: number of ``step()`` calls between copies.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.objectives import DQNLoss
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> updater = HardUpdate(DQNLoss(net, action_space="one_hot"), value_network_update_interval=2)
        >>> updater.step(); updater.step()
    """

    def __init__(self, loss: LossModule, *, value_network_update_interval: int = 1000) -> None:
        if value_network_update_interval < 1:
            raise ValueError(
                "HardUpdate: value_network_update_interval must be >= 1 "
                f"(got {value_network_update_interval})."
            )
        super().__init__(loss)
        self.interval = value_network_update_interval
        self._count = 0

    @torch.no_grad()
    def step(self) -> None:
        """Counts a step and copies the parameters when the interval is reached."""
        self._count += 1
        if self._count % self.interval == 0:
            self.init_()
