"""Target-network updaters: explicit objects the training loop calls with ``.step()``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import Tensor

from tdrl.objectives._base import LossModule

__all__ = ["HardUpdate", "SoftUpdate", "TargetNetUpdater"]


class TargetNetUpdater:
    """Base of the target-network updaters: pairs each live network of a loss with its target.

    As in TorchRL, building an updater copies the live parameters into the targets
    (``init_()``), and ``step()`` calls ``_step(live, target)`` once per network with
    ``live``/``target`` the network's parameters as TensorDicts (detached data: update
    ``target`` in place). Subclasses write ``_step``; :class:`SoftUpdate` and
    :class:`HardUpdate` are the two built in.

    Args:
        loss_module: a loss with target networks (``delay_*`` options).

    Raises:
        ValueError: the loss keeps no target network.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from tdrl.objectives import DQNLoss
        >>> class Halfway(TargetNetUpdater):
        ...     def _step(self, p_source, p_target):
        ...         p_target.lerp_(p_source, 0.5)
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(net, action_space="one_hot")
        >>> updater = Halfway(loss)
        >>> with torch.no_grad():
        ...     _ = net.module.bias.fill_(2.0)
        ...     _ = loss.target_value_network_params.zero_()
        >>> updater.step()
        >>> loss.target_value_network_params["module", "bias"]
        tensor([1., 1.])
    """

    def __init__(self, loss_module: LossModule) -> None:
        if not loss_module._targets:
            raise ValueError(
                f"{type(self).__name__}: {type(loss_module).__name__} has no target network "
                "(got none; expected a loss built with delay_* / target networks)."
            )
        self.loss_module = loss_module
        self._cached: list[tuple[TensorDictBase, TensorDictBase]] | None = None
        self._cached_leaves: tuple[list[Tensor], list[Tensor]] | None = None
        self.initialized = False
        self.init_()

    @property
    def _pairs(self) -> list[tuple[TensorDictBase, TensorDictBase]]:
        # Targets of lazy networks appear at the loss's first call: cache once all exist.
        if self._cached is not None:
            return self._cached
        pairs = [(live.data, target.data) for live, target in self.loss_module.target_pairs()]
        if not self.loss_module._pending_targets:
            self._cached = pairs
        return pairs

    @property
    def _leaves(self) -> tuple[list[Tensor], list[Tensor]]:
        """``(targets, sources)``: every target leaf and its live leaf (paired by key, as
        ``TensorDict.lerp_`` pairs them), flat over all networks, for one ``_foreach`` call."""
        if self._cached_leaves is not None:
            return self._cached_leaves
        targets: list[Tensor] = []
        sources: list[Tensor] = []
        for live, target in self._pairs:
            for key, leaf in target.items(True, True):
                targets.append(leaf)
                sources.append(live.get(key))
        if self._cached is not None:
            self._cached_leaves = (targets, sources)
        return targets, sources

    @torch.no_grad()
    def init_(self) -> None:
        """Copies the live parameters into the targets."""
        for live, target in self._pairs:
            target.update_(live)
        self.initialized = True

    @torch.no_grad()
    def step(self) -> None:
        """Updates every target from its live network (``_step`` per network)."""
        for live, target in self._pairs:
            self._step(live, target)

    def _step(self, p_source: TensorDictBase, p_target: TensorDictBase) -> None:
        """Updates ``p_target`` in place from ``p_source`` (one network's parameters)."""
        raise NotImplementedError(
            f"{type(self).__name__}._step: not implemented (got the base class; expected a "
            "subclass that writes _step(p_source, p_target)). Use SoftUpdate or HardUpdate."
        )

    def state_dict(self) -> dict[str, Any]:
        """The updater's progress (the targets themselves belong to the loss's state dict)."""
        return {"initialized": self.initialized}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores the progress saved by :meth:`state_dict`."""
        self.initialized = bool(state_dict.get("initialized", self.initialized))


class SoftUpdate(TargetNetUpdater):
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
        """Moves every target towards its live network: one ``_foreach_lerp_`` over all leaves
        (the same numbers as ``_step`` per network; a subclass's own ``_step`` is used)."""
        if type(self)._step is not SoftUpdate._step:
            super().step()
            return
        targets, sources = self._leaves
        if targets:
            torch._foreach_lerp_(targets, sources, self.tau)

    def _step(self, p_source: TensorDictBase, p_target: TensorDictBase) -> None:
        p_target.lerp_(p_source, self.tau)


class HardUpdate(TargetNetUpdater):
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
        self.value_network_update_interval = value_network_update_interval
        self.counter = 0

    @torch.no_grad()
    def step(self) -> None:
        """Counts a step and copies the parameters when the interval is reached."""
        self.counter += 1
        if self.counter == self.value_network_update_interval:
            self.counter = 0
            super().step()

    def _step(self, p_source: TensorDictBase, p_target: TensorDictBase) -> None:
        p_target.update_(p_source)

    def state_dict(self) -> dict[str, Any]:
        """The progress: ``initialized`` and the steps counted since the last copy."""
        return {**super().state_dict(), "counter": self.counter}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restores ``initialized`` and the step counter."""
        super().load_state_dict(state_dict)
        self.counter = int(state_dict.get("counter", self.counter))
