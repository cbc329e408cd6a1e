"""Value-decomposition mixers: VDNMixer (a sum) and QMixer (a monotonic hypernetwork)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from tdrl.modules.models._layers import DeviceLike

__all__ = ["QMixer", "VDNMixer"]


class _Mixer(nn.Module):
    """Checks the inputs of a mixer, then calls ``mix(chosen_action_value, state)``.

    ``chosen_action_value`` is ``[*B, n_agents, 1]``; ``state`` (only for mixers that need it)
    is ``[*B, *state_shape]``. The result is ``[*B, 1]``.
    """

    needs_state: bool

    def __init__(
        self, n_agents: int, needs_state: bool, state_shape: tuple[int, ...], device: DeviceLike
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if not isinstance(n_agents, int) or n_agents < 1:
            raise ValueError(
                f"{name}.__init__: n_agents must be a positive int (got {n_agents!r};"
                " expected e.g. 3). Pass the number of agents in the group."
            )
        self.n_agents = n_agents
        self.needs_state = needs_state
        self.state_shape = state_shape
        self.device = device

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Mixes ``(chosen_action_value[, state])`` into the group's value ``[*B, 1]``."""
        name = f"{type(self).__name__}.forward"
        wanted = 2 if self.needs_state else 1
        if len(inputs) != wanted:
            what = "(chosen_action_value, state)" if self.needs_state else "(chosen_action_value,)"
            raise ValueError(
                f"{name}: wrong number of inputs (got {len(inputs)}; expected {what}). Pass"
                f" {what[1:-1].rstrip(',')} (a TensorDictModule's in_keys in this order)."
            )
        chosen = inputs[0]
        if chosen.shape[-2:] != (self.n_agents, 1):
            raise ValueError(
                f"{name}: chosen_action_value has the wrong shape (got {tuple(chosen.shape)};"
                f" expected (*batch, {self.n_agents}, 1): one value per agent). Gather the"
                " value of each agent's action, keeping a trailing dim of size 1."
            )
        state = inputs[1] if self.needs_state else None
        if state is not None:
            self._check_state(chosen, state, name)
        return self.mix(chosen, state)

    def _check_state(self, chosen: torch.Tensor, state: torch.Tensor, name: str) -> None:
        n = len(self.state_shape)
        if state.ndim < n or tuple(state.shape[state.ndim - n :]) != self.state_shape:
            raise ValueError(
                f"{name}: state has the wrong shape (got {tuple(state.shape)}; expected"
                f" (*batch, *{self.state_shape})). Pass the global state the mixer was built for."
            )
        if state.shape[: state.ndim - n] != chosen.shape[:-2]:
            raise ValueError(
                f"{name}: state and chosen_action_value have different batch dims (got"
                f" {tuple(state.shape[: state.ndim - n])} and {tuple(chosen.shape[:-2])};"
                " expected the same). Pass one state per joint transition."
            )

    def mix(self, chosen_action_value: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """Mixes checked inputs (subclasses write it)."""
        raise NotImplementedError


class VDNMixer(_Mixer):
    """VDN (Sunehag et al., 2017): the group's value is the sum of the agents' values.

    Maps the values of the agents' chosen actions ``[*B, n_agents, 1]`` to ``[*B, 1]``; it
    has no parameters and reads no state.

    Args:
        n_agents: the number of agents in the group.
        device: accepted for TorchRL code (the mixer has no parameters to place).

    Raises:
        ValueError: an input that is not ``[*B, n_agents, 1]``, or a second input.

    Examples:
        >>> mixer = VDNMixer(n_agents=3)
        >>> mixer(torch.ones(5, 3, 1)).squeeze(-1)
        tensor([3., 3., 3., 3., 3.])
    """

    def __init__(self, n_agents: int, device: DeviceLike = None) -> None:
        super().__init__(n_agents, needs_state=False, state_shape=(), device=device)

    def mix(self, chosen_action_value: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """The sum over the agent dim (-2): ``[*B, n_agents, 1]`` -> ``[*B, 1]``."""
        return chosen_action_value.sum(-2)


class QMixer(_Mixer):
    """QMIX (Rashid et al., 2018): a monotonic mixing network conditioned on the global state.

    The agents' values ``q`` (``[*B, n_agents, 1]``) go through two mixing layers whose weights
    are produced from the flattened state ``s`` by hypernetworks and made non-negative with
    ``abs()``, so the group's value never decreases when an agent's value grows::

        h = elu(q @ |W1(s)| + b1(s))         # W1(s): [n_agents, embed], b1(s): [embed]
        Q_tot = h @ |W2(s)| + V(s)           # W2(s): [embed, 1], V: Linear-ReLU-Linear

    The parameters carry TorchRL's names (``hyper_w_1``, ``hyper_w_final``, ``hyper_b_1``,
    ``V``), so state dicts load both ways.

    Args:
        state_shape: the shape of one global state (an int for a flat state).
        mixing_embed_dim: the width ``embed`` of the mixing layer.
        n_agents: the number of agents in the group.
        device: where the parameters are created (torch's default device when None).

    Raises:
        ValueError: a bad size at construction; a ``chosen_action_value`` that is not
            ``[*B, n_agents, 1]``, or a ``state`` that is not ``[*B, *state_shape]``.

    Examples:
        >>> mixer = QMixer(state_shape=(4,), mixing_embed_dim=8, n_agents=3)
        >>> mixer(torch.randn(5, 3, 1), torch.randn(5, 4)).shape
        torch.Size([5, 1])
    """

    def __init__(
        self,
        state_shape: int | Sequence[int] | torch.Size,
        mixing_embed_dim: int,
        n_agents: int,
        device: DeviceLike = None,
    ) -> None:
        shape = (state_shape,) if isinstance(state_shape, int) else tuple(state_shape)
        if not shape or any(not isinstance(d, int) or d < 1 for d in shape):
            raise ValueError(
                f"QMixer.__init__: state_shape must be positive sizes (got {state_shape!r};"
                " expected e.g. (48,) or (n_agents, obs_dim)). Pass the shape of one state."
            )
        if not isinstance(mixing_embed_dim, int) or mixing_embed_dim < 1:
            raise ValueError(
                f"QMixer.__init__: mixing_embed_dim must be a positive int (got"
                f" {mixing_embed_dim!r}; expected e.g. 32). Pass the mixing width."
            )
        super().__init__(n_agents, needs_state=True, state_shape=shape, device=device)
        self.embed_dim = mixing_embed_dim
        self.state_dim = math.prod(shape)
        s, e = self.state_dim, mixing_embed_dim
        self.hyper_w_1 = nn.Linear(s, e * n_agents, device=device)
        self.hyper_w_final = nn.Linear(s, e, device=device)
        self.hyper_b_1 = nn.Linear(s, e, device=device)
        self.V = nn.Sequential(
            nn.Linear(s, e, device=device), nn.ReLU(), nn.Linear(e, 1, device=device)
        )

    def mix(self, chosen_action_value: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """The QMIX mixing of checked inputs: ``[*B, n_agents, 1]`` and state -> ``[*B, 1]``."""
        if state is None:
            raise ValueError(
                "QMixer.mix: the state is missing (got None; expected [*B, *state_shape])."
                " Pass the global state."
            )
        batch = chosen_action_value.shape[:-2]
        s = state.reshape(-1, self.state_dim)
        q = chosen_action_value.reshape(-1, 1, self.n_agents)
        w1 = self.hyper_w_1(s).abs().view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b_1(s).unsqueeze(-2)
        hidden = F.elu(torch.baddbmm(b1, q, w1))  # [N, 1, embed]
        w_final = self.hyper_w_final(s).abs().unsqueeze(-1)  # [N, embed, 1]
        out = torch.baddbmm(self.V(s).unsqueeze(-1), hidden, w_final)  # [N, 1, 1]
        return out.reshape(*batch, 1)

    def extra_repr(self) -> str:
        return (
            f"state_shape={self.state_shape}, mixing_embed_dim={self.embed_dim},"
            f" n_agents={self.n_agents}"
        )
