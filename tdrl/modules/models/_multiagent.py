"""MultiAgentMLP: one MLP per agent (or one shared), evaluated for all agents at once."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

from tdrl.modules.models._layers import DeviceLike, build_on_device
from tdrl.modules.models._mlp import _hidden_sizes

__all__ = ["MultiAgentMLP"]

_W = "MultiAgentMLP.__init__"
# MLP arguments a stacked linear layer cannot honour; any non-default value is refused.
_REFUSED = {
    "norm_class": None,
    "norm_kwargs": None,
    "single_bias_last_layer": False,
    "layer_class": nn.Linear,
    "layer_kwargs": None,
}


class _Layer(nn.Module):
    """Holds one linear layer's ``weight`` (``[agents,] out, in``) and ``bias``."""

    def __init__(
        self, agents: int | None, n_in: int | None, n_out: int, bias: bool, device: DeviceLike
    ) -> None:
        super().__init__()
        lead = () if agents is None else (agents,)
        self.lead, self.n_out = lead, n_out
        self._device = None if device is None else torch.device(device)
        if n_in is None:
            self.weight = cast(nn.Parameter, nn.UninitializedParameter())
        else:
            self.weight = nn.Parameter(torch.empty(*lead, n_out, n_in, device=device))
        self.bias = nn.Parameter(torch.empty(*lead, n_out, device=device)) if bias else None
        if n_in is not None:
            self.reset_parameters()

    def materialize(self, n_in: int) -> None:
        """Gives a lazy weight its input size and initialises the layer."""
        if isinstance(self.weight, nn.UninitializedParameter):
            with torch.no_grad():
                self.weight.materialize((*self.lead, self.n_out, n_in), device=self._device)
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialisation, drawn independently for every agent."""
        bound = 1.0 / math.sqrt(self.weight.shape[-1])
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)


# In-place versions of parameter-free activations, applied to fresh layer outputs.
_INPLACE: dict[type, Callable[[torch.Tensor], torch.Tensor]] = {
    nn.Tanh: torch.tanh_,
    nn.ReLU: torch.relu_,
    nn.Sigmoid: torch.sigmoid_,
}


def _check_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    allowed = {"activation_kwargs", "dropout", "bias_last_layer", "activate_last_layer"}
    for name, default in _REFUSED.items():
        if name in kwargs and kwargs.pop(name) is not default:
            raise ValueError(
                f"{_W}: {name} is not supported (got a non-default value; expected {default!r})."
                " MultiAgentMLP stacks plain linear layers per agent; build the per-agent"
                " networks yourself for other layers."
            )
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(
            f"{_W}: unknown arguments (got {unknown}; expected MLP arguments among"
            f" {sorted(allowed | set(_REFUSED))}). Check the spelling."
        )
    act_kwargs = kwargs.get("activation_kwargs")
    if act_kwargs is not None and not isinstance(act_kwargs, Mapping):
        raise ValueError(
            f"{_W}: activation_kwargs must be one dict (got {type(act_kwargs).__name__};"
            " expected a dict shared by every layer). Pass a single dict."
        )
    return kwargs


class MultiAgentMLP(nn.Module):
    """An MLP for each of ``n_agents`` agents, all evaluated in one batched call.

    Inputs have shape ``(*batch, n_agents, n_agent_inputs)`` and outputs
    ``(*batch, n_agents, n_agent_outputs)``. The layers are the ones :class:`MLP` builds for the
    same ``depth``/``num_cells`` (so ``MultiAgentMLP(i, o, n, ...)`` alone is one linear layer
    per agent). Per-agent weights are stacked (``weight`` of shape ``[n_agents, out, in]``)
    and applied with batched matrix products, never a Python loop over agents.

    - ``share_params=True``: one set of weights for all agents (homogeneous agents).
    - ``centralized=True``: every agent reads the inputs of all agents, flattened to
      ``n_agents * n_agent_inputs`` features; with shared parameters all agents then get the
      same output (an expanded view).

    The parameters live in ``self.params`` (``self._empty_net`` with ``use_td_params=False``)
    under the names :class:`MLP` gives its layers (``"0.weight"``, ``"2.weight"``, ...).

    Args:
        n_agent_inputs: features per agent; ``None`` infers them on the first call.
        n_agent_outputs: outputs per agent.
        n_agents: number of agents.
        centralized: whether each agent sees all agents' inputs (required).
        share_params: whether the agents share one network (required).
        device: where the parameters are created.
        depth: number of hidden layers, as in :class:`MLP`.
        num_cells: hidden sizes, as in :class:`MLP`.
        activation_class: activation class or factory.
        use_td_params: only changes where the parameters are registered (see above).
        **kwargs: further :class:`MLP` arguments: ``activation_kwargs`` (one dict),
            ``dropout``, ``bias_last_layer``, ``activate_last_layer``; ``centralised`` is read
            as ``centralized``. Norm layers, other layer classes and a single shared bias are
            refused.

    Raises:
        TypeError: ``centralized`` or ``share_params`` missing, or an unknown argument.
        ValueError: an MLP option that cannot be honoured, or an input whose agent dim
            (``-2``) is not ``n_agents``.

    Examples:
        >>> mlp = MultiAgentMLP(3, 2, 4, centralized=False, share_params=False, depth=1)
        >>> mlp(torch.zeros(5, 4, 3)).shape
        torch.Size([5, 4, 2])
        >>> mlp.state_dict()["params.0.weight"].shape
        torch.Size([4, 32, 3])
    """

    def __init__(
        self,
        n_agent_inputs: int | None,
        n_agent_outputs: int,
        n_agents: int,
        *,
        centralized: bool | None = None,
        share_params: bool | None = None,
        device: DeviceLike = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        activation_class: Callable[..., nn.Module] = nn.Tanh,
        use_td_params: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if "centralised" in kwargs:
            centralized = kwargs.pop("centralised")
        for name, value in (("centralized", centralized), ("share_params", share_params)):
            if value is None:
                raise TypeError(
                    f"{_W}: {name} is missing (got None; expected True or False). Pass"
                    f" {name}=True or {name}=False."
                )
        opts = _check_kwargs(kwargs)
        self.n_agents, self.n_agent_inputs, self.n_agent_outputs = (
            n_agents,
            n_agent_inputs,
            n_agent_outputs,
        )
        self.centralized, self.share_params = bool(centralized), bool(share_params)
        self.depth, self.num_cells = depth, num_cells
        self.activation_class = activation_class
        self.dropout: float | None = opts.get("dropout")
        self.activate_last_layer = bool(opts.get("activate_last_layer", False))
        sizes = _hidden_sizes(num_cells, depth)
        n_in = n_agent_inputs
        if self.centralized and n_in is not None:
            n_in = n_in * n_agents
        agents = None if self.share_params else n_agents
        container = nn.Module()
        self._names: list[str] = []
        self._acts = nn.ModuleList()
        index, prev = 0, n_in
        for i, width in enumerate([*sizes, n_agent_outputs]):
            last = i == len(sizes)
            bias = bool(opts.get("bias_last_layer", True)) if last else True
            container.add_module(str(index), _Layer(agents, prev, width, bias, device))
            self._names.append(str(index))
            index += 1
            if not last or self.activate_last_layer:
                index += int(self.dropout is not None) + 1
                act_kwargs = dict(opts.get("activation_kwargs") or {})
                self._acts.append(build_on_device(activation_class, device, **act_kwargs))
            prev = width
        self._container_name = "params" if use_td_params else "_empty_net"
        self.add_module(self._container_name, container)
        self.use_td_params = use_td_params

    def _layers(self) -> list[_Layer]:
        container = getattr(self, self._container_name)
        return [getattr(container, name) for name in self._names]

    def reset_parameters(self) -> None:
        """Draws fresh weights for every (initialised) layer and agent."""
        for layer in self._layers():
            if not isinstance(layer.weight, nn.UninitializedParameter):
                layer.reset_parameters()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Maps ``(*batch, n_agents, n_agent_inputs)`` to ``(*batch, n_agents, n_agent_outputs)``."""
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        if x.ndim < 2 or x.shape[-2] != self.n_agents:
            raise ValueError(
                f"MultiAgentMLP.forward: the agent dim is wrong (got input shape {tuple(x.shape)};"
                f" expected (*batch, {self.n_agents}, n_agent_inputs)). Put the agents at dim -2."
            )
        batch = x.shape[:-2]
        layers = self._layers()
        width = x.shape[-1] * (self.n_agents if self.centralized else 1)
        layers[0].materialize(width)
        if width != layers[0].weight.shape[-1]:
            raise ValueError(
                f"MultiAgentMLP.forward: wrong number of input features (got input shape"
                f" {tuple(x.shape)}; expected (*batch, {self.n_agents},"
                f" {self._features_per_agent()})). Pass n_agent_inputs features per agent."
            )
        # Rows of (agents x) features: 2-D inputs keep every layer output a fresh tensor, so
        # activations run in place without autograd copies.
        flat = x.reshape(-1, width) if self.centralized else x.reshape(-1, x.shape[-1])
        if self.share_params:
            y = self._run_shared(flat, layers)
            if self.centralized:
                return y.reshape(*batch, 1, y.shape[-1]).expand(*batch, self.n_agents, -1)
            return y.reshape(*batch, self.n_agents, y.shape[-1])
        # Per-agent weights: rows become (agents, N, features) for batched matmuls; centralised,
        # every agent reads the same rows (an expanded view: faster than one wide matmul
        # followed by a transpose). A contiguous copy of the (small) input beats strided
        # matmuls (both measured).
        if self.centralized:
            h = flat.unsqueeze(0).expand(self.n_agents, *flat.shape)
        else:
            h = flat.unflatten(0, (-1, self.n_agents)).transpose(0, 1).contiguous()
        for i, layer in enumerate(layers):
            h = self._post(self._agent_linear(h, layer), i)
        return h.transpose(0, 1).reshape(*batch, self.n_agents, h.shape[-1])

    def _features_per_agent(self) -> int:
        n_in = self._layers()[0].weight.shape[-1]
        return n_in // self.n_agents if self.centralized else n_in

    @staticmethod
    def _agent_linear(h: torch.Tensor, layer: _Layer) -> torch.Tensor:
        wt = layer.weight.transpose(-1, -2)
        if layer.bias is None:
            return torch.bmm(h, wt)
        return torch.baddbmm(layer.bias.unsqueeze(-2), h, wt)

    def _run_shared(self, x: torch.Tensor, layers: list[_Layer]) -> torch.Tensor:
        for i, layer in enumerate(layers):
            x = self._post(F.linear(x, layer.weight, layer.bias), i)
        return x

    def _post(self, h: torch.Tensor, i: int) -> torch.Tensor:
        """Dropout and activation after layer ``i``; ``h`` is a fresh (not a view) output."""
        if i >= len(self._acts):
            return h
        if self.dropout is not None:
            h = F.dropout(h, self.dropout, self.training)
        act = self._acts[i]
        inplace = _INPLACE.get(type(act))
        if inplace is None or act._forward_hooks or act._forward_pre_hooks:
            return act(h)
        # The layer's backward does not need its output: overwriting it saves a copy.
        return inplace(h)

    def extra_repr(self) -> str:
        return (
            f"n_agents={self.n_agents}, centralized={self.centralized},"
            f" share_params={self.share_params}"
        )
