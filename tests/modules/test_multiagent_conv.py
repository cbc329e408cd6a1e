"""MultiAgentConvNet against a per-agent loop of plain convolutions with the same weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from tdrl.modules import ConvNet, MultiAgentConvNet

N_AGENTS, C, SIZE = 3, 2, 12


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _reference(net: MultiAgentConvNet, x: torch.Tensor, strides: list[int]) -> torch.Tensor:
    """Per agent: conv2d with that agent's weights, ELU, ..., flatten (C, H, W)."""
    state = net.state_dict()
    weights = [state[k] for k in state if k.endswith("weight")]
    outs = []
    for agent in range(N_AGENTS):
        h = x.flatten(-4, -3) if net.centralized else x[..., agent, :, :, :]
        lead = h.shape[:-3]
        h = h.reshape(-1, *h.shape[-3:])
        for weight, stride, key in zip(weights, strides, [k for k in state if "weight" in k]):
            w = weight if net.share_params else weight[agent]
            b = state.get(key.replace("weight", "bias"))
            if b is not None and not net.share_params:
                b = b[agent]
            h = F.elu(F.conv2d(h, w, b, stride=stride))
        outs.append(h.flatten(-3).reshape(*lead, -1))
    return torch.stack(outs, -2)


@pytest.mark.parametrize("batch", [(), (2, 3)])
@pytest.mark.parametrize("centralized", [False, True])
@pytest.mark.parametrize("share_params", [False, True])
def test_matches_per_agent_loop(batch, centralized, share_params) -> None:
    net = MultiAgentConvNet(
        N_AGENTS,
        centralized,
        share_params,
        in_features=C,
        num_cells=[4, 5],
        kernel_sizes=3,
        strides=[2, 1],
    )
    x = torch.randn(*batch, N_AGENTS, C, SIZE, SIZE)
    out = net(x)
    expected = _reference(net, x, [2, 1])
    assert out.shape == (*batch, N_AGENTS, 5 * 3 * 3)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    if not share_params:  # independent per-agent weights: agents differ on the same input
        same = x[..., :1, :, :, :].expand_as(x)
        y = net(same)
        assert centralized or not torch.allclose(y[..., 0, :], y[..., 1, :])


def test_torchrl_defaults_and_lazy_input() -> None:
    # TorchRL: three 32-channel convs, kernel 5, stride 2, ELU; channels inferred when not given
    net = MultiAgentConvNet(N_AGENTS, False, False)
    x = torch.randn(4, N_AGENTS, C, 32, 32)
    out = net(x)
    # 32 -> 14 -> 5 -> 1 with kernel 5, stride 2
    assert out.shape == (4, N_AGENTS, 32)
    assert net.params.state_dict()["0.weight"].shape == (N_AGENTS, 32, C, 5, 5)
    torch.testing.assert_close(out, _reference(net, x, [2, 2, 2]), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert net.params[0].weight.grad is not None
    shared = MultiAgentConvNet(N_AGENTS, centralized=False, share_params=True, use_td_params=False)
    assert isinstance(shared._empty_net, ConvNet) and not hasattr(shared, "params")


def test_errors() -> None:
    with pytest.raises(TypeError, match="centralized is missing"):
        MultiAgentConvNet(N_AGENTS, share_params=True)
    with pytest.raises(TypeError, match="share_params is missing"):
        MultiAgentConvNet(N_AGENTS, centralised=True)
    with pytest.raises(ValueError, match="norm_class is not supported with share_params=False"):
        MultiAgentConvNet(N_AGENTS, False, False, norm_class=nn.BatchNorm2d)
    with pytest.raises(TypeError, match="unknown arguments"):
        MultiAgentConvNet(N_AGENTS, False, False, num_cell=[3])
    net = MultiAgentConvNet(N_AGENTS, False, False, in_features=C, num_cells=[4])
    with pytest.raises(ValueError, match="agent dim is wrong"):
        net(torch.zeros(2, N_AGENTS + 1, C, SIZE, SIZE))
