"""MultiAgentConvNet: one ConvNet per agent (or one shared), evaluated for all agents at once."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

from tdrl.modules.models._conv import ConvNet, KernelLike, _depth, _expand
from tdrl.modules.models._layers import DeviceLike, SquashDims, build_on_device, per_layer_kwargs

__all__ = ["MultiAgentConvNet"]

_W = "MultiAgentConvNet.__init__"
# ConvNet options a grouped (per-agent) convolution stack does not implement.
_UNSHARED_REFUSED: dict[str, Any] = {
    "norm_class": None,
    "norm_kwargs": None,
    "aggregator_class": SquashDims,
    "aggregator_kwargs": None,
    "squeeze_output": False,
}


def _pair(value: KernelLike) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    first, second = value
    return (int(first), int(second))


class _AgentConv(nn.Module):
    """A convolution per agent: ``weight`` ``[agents, out, in, kh, kw]``, ``bias`` ``[agents, out]``.

    Applied as one grouped convolution over the agents' stacked channels; with ``shared_input``
    every agent's filters read all input channels (a centralised first layer).
    """

    def __init__(
        self,
        agents: int,
        n_in: int | None,
        n_out: int,
        kernel: KernelLike,
        stride: KernelLike,
        padding: KernelLike,
        *,
        bias: bool,
        shared_input: bool,
        device: DeviceLike,
    ) -> None:
        super().__init__()
        self.agents, self.n_out, self.kernel = agents, n_out, _pair(kernel)
        self.stride, self.padding, self.shared_input = _pair(stride), _pair(padding), shared_input
        self._device = None if device is None else torch.device(device)
        if n_in is None:
            self.weight = cast(nn.Parameter, nn.UninitializedParameter())
        else:
            self.weight = nn.Parameter(
                torch.empty(agents, n_out, n_in, *self.kernel, device=device)
            )
        self.bias = nn.Parameter(torch.empty(agents, n_out, device=device)) if bias else None
        if n_in is not None:
            self.reset_parameters()

    def materialize(self, n_in: int) -> None:
        """Gives a lazy weight its input channels and initialises the layer."""
        if isinstance(self.weight, nn.UninitializedParameter):
            with torch.no_grad():
                shape = (self.agents, self.n_out, n_in, *self.kernel)
                self.weight.materialize(shape, device=self._device)
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Conv2d``'s initialisation (uniform in ``1/sqrt(fan_in)``), per agent."""
        bound = 1.0 / math.sqrt(self.weight[0, 0].numel())
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, agents * in, H, W]`` (or ``[N, in, H, W]`` read by all) to ``[N, agents * out, ...]``."""
        if not self.shared_input:
            self.materialize(x.shape[1] // self.agents)
        else:
            self.materialize(x.shape[1])
        weight = self.weight.flatten(0, 1)
        bias = None if self.bias is None else self.bias.flatten()
        groups = 1 if self.shared_input else self.agents
        return F.conv2d(x, weight, bias, self.stride, self.padding, groups=groups)


class MultiAgentConvNet(nn.Module):
    """A :class:`ConvNet` for each of ``n_agents`` agents, all evaluated in one call.

    Inputs have shape ``(*batch, n_agents, C, H, W)`` and outputs ``(*batch, n_agents,
    features)`` (the flattened feature maps of the last convolution, as :class:`ConvNet`'s
    default aggregator gives them). The defaults are TorchRL's: convolutions of 32, 32 and 32
    channels with kernel 5, stride 2, no padding and ELU.

    - ``share_params=True``: one :class:`ConvNet` for all agents (any ConvNet argument).
    - ``share_params=False``: per-agent weights (``weight`` ``[n_agents, out, in, kh, kw]``)
      run as one grouped convolution per layer, never a Python loop over agents; norms and
      other aggregators are refused here.
    - ``centralized=True``: every agent reads the channels of all agents (``n_agents * C``
      input channels); with shared parameters all agents then get the same output.

    The parameters live in ``self.params`` (``self._empty_net`` with ``use_td_params=False``).

    Args:
        n_agents: number of agents.
        centralized: whether each agent sees all agents' inputs (required).
        share_params: whether the agents share one network (required).
        in_features: input channels per agent; ``None`` infers them on the first call.
        device: where the parameters are created.
        num_cells: output channels of each convolution (default ``[32, 32, 32]``).
        kernel_sizes: kernel size, an int (or pair) or one per layer.
        strides: stride, an int or one per layer.
        paddings: padding, an int or one per layer.
        activation_class: activation class or factory after every convolution.
        use_td_params: only changes where the parameters are registered (see above).
        **kwargs: further :class:`ConvNet` arguments (``depth``, ``activation_kwargs``,
            ``bias_last_layer``, and with shared parameters also ``norm_class``,
            ``norm_kwargs``, ``aggregator_class``, ``aggregator_kwargs``, ``squeeze_output``);
            ``centralised`` is read as ``centralized``.

    Raises:
        TypeError: ``centralized`` or ``share_params`` missing, or an unknown argument.
        ValueError: an option per-agent weights cannot honour, or an input whose agent dim
            (``-4``) is not ``n_agents``.

    Examples:
        >>> net = MultiAgentConvNet(3, centralized=False, share_params=False, num_cells=[4, 4])
        >>> net(torch.zeros(2, 3, 1, 32, 32)).shape  # 32 -> 14 -> 5 pixels, 4 channels
        torch.Size([2, 3, 100])
        >>> net.params.state_dict()["0.weight"].shape
        torch.Size([3, 4, 1, 5, 5])
    """

    def __init__(
        self,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        *,
        in_features: int | None = None,
        device: DeviceLike = None,
        num_cells: Sequence[int] | None = None,
        kernel_sizes: Sequence[KernelLike] | KernelLike = 5,
        strides: Sequence[KernelLike] | KernelLike = 2,
        paddings: Sequence[KernelLike] | KernelLike = 0,
        activation_class: Callable[..., nn.Module] = nn.ELU,
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
        self.n_agents, self.in_features = n_agents, in_features
        self.centralized, self.share_params = bool(centralized), bool(share_params)
        self.use_td_params = use_td_params
        channels_in = in_features
        if self.centralized and channels_in is not None:
            channels_in *= n_agents
        cells = [32, 32, 32] if num_cells is None else num_cells
        conv: dict[str, Any] = {
            "kernel_sizes": kernel_sizes,
            "strides": strides,
            "paddings": paddings,
        }
        if self.share_params:
            net: nn.Module = ConvNet(
                channels_in,
                num_cells=cells,
                activation_class=activation_class,
                device=device,
                **conv,
                **kwargs,
            )
        else:
            net = self._grouped(channels_in, cells, conv, activation_class, device, kwargs)
        self._container_name = "params" if use_td_params else "_empty_net"
        self.add_module(self._container_name, net)

    def _grouped(
        self,
        channels_in: int | None,
        cells: Sequence[int] | int,
        conv: dict[str, Any],
        activation_class: Callable[..., nn.Module],
        device: DeviceLike,
        kwargs: dict[str, Any],
    ) -> nn.Sequential:
        for name, default in _UNSHARED_REFUSED.items():
            if name in kwargs and kwargs.pop(name) is not default:
                raise ValueError(
                    f"{_W}: {name} is not supported with share_params=False (got a non-default "
                    f"value; expected {default!r}). Share the parameters, or build the "
                    "per-agent networks yourself."
                )
        unknown = sorted(set(kwargs) - {"depth", "activation_kwargs", "bias_last_layer"})
        if unknown:
            raise TypeError(
                f"{_W}: unknown arguments (got {unknown}; expected ConvNet arguments). Check "
                "the spelling."
            )
        n = _depth(kwargs.get("depth"), {"num_cells": cells, **conv})
        acts = per_layer_kwargs(kwargs.get("activation_kwargs"), n, _W, "activation_kwargs")
        layers: list[nn.Module] = []
        prev = channels_in
        widths = _expand(cells, n)
        columns = zip(widths, *(_expand(v, n) for v in conv.values()))
        for i, (width, kernel, stride, padding) in enumerate(columns):
            bias = i < n - 1 or bool(kwargs.get("bias_last_layer", True))
            shared_input = i == 0 and self.centralized
            layers.append(
                _AgentConv(
                    self.n_agents,
                    prev,
                    int(width),
                    kernel,
                    stride,
                    padding,
                    bias=bias,
                    shared_input=shared_input,
                    device=device,
                )
            )
            layers.append(build_on_device(activation_class, device, **acts[i]))
            prev = int(width)
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Maps ``(*batch, n_agents, C, H, W)`` to ``(*batch, n_agents, features)``."""
        if x.ndim < 4 or x.shape[-4] != self.n_agents:
            raise ValueError(
                f"MultiAgentConvNet.forward: the agent dim is wrong (got input shape "
                f"{tuple(x.shape)}; expected (*batch, {self.n_agents}, C, H, W)). Put the agents "
                "at dim -4."
            )
        net = getattr(self, self._container_name)
        batch = x.shape[:-4]
        if self.share_params:
            if not self.centralized:
                return net(x)
            y = net(x.flatten(-4, -3))
            return y.unsqueeze(len(batch)).expand(*batch, self.n_agents, *y.shape[len(batch) :])
        rows = x.reshape(-1, x.shape[-4] * x.shape[-3], *x.shape[-2:])  # agents' channels stacked
        y = net(rows)
        y = y.reshape(y.shape[0], self.n_agents, -1)
        return y.reshape(*batch, self.n_agents, y.shape[-1])

    def extra_repr(self) -> str:
        return (
            f"n_agents={self.n_agents}, centralized={self.centralized},"
            f" share_params={self.share_params}"
        )
