"""MultiAgentMLP against a per-agent loop of plain nn.Linear layers with the same weights."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torch.nn import functional as F

from tdrl.modules import MultiAgentMLP

N_AGENTS, N_IN, N_OUT = 3, 4, 2


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _reference(mlp: MultiAgentMLP, x: torch.Tensor, act: type[nn.Module] = nn.Tanh) -> torch.Tensor:
    """Loops over agents and applies F.linear with each agent's slice of the live weights."""
    state = mlp.state_dict(keep_vars=True)
    layers = [(k, v) for k, v in state.items() if k.endswith("weight")]
    outs = []
    for agent in range(N_AGENTS):
        h = x.flatten(-2, -1) if mlp.centralized else x[..., agent, :]
        for i, (key, weight) in enumerate(layers):
            w = weight if mlp.share_params else weight[agent]
            bias = state.get(key.replace("weight", "bias"))
            if bias is not None and not mlp.share_params:
                bias = bias[agent]
            h = F.linear(h, w, bias)
            if i < len(layers) - 1:
                h = act()(h)
        outs.append(h)
    return torch.stack(outs, -2)


@pytest.mark.parametrize("centralized", [False, True])
@pytest.mark.parametrize("share_params", [False, True])
@pytest.mark.parametrize("batch", [(), (2, 5)])
def test_matches_per_agent_loop(
    centralized: bool, share_params: bool, batch: tuple[int, ...]
) -> None:
    mlp = MultiAgentMLP(
        N_IN, N_OUT, N_AGENTS, centralized=centralized, share_params=share_params, num_cells=[8, 6]
    )
    x = torch.randn(*batch, N_AGENTS, N_IN)
    out = mlp(x)
    assert out.shape == (*batch, N_AGENTS, N_OUT)
    torch.testing.assert_close(out, _reference(mlp, x))


@pytest.mark.parametrize("centralized", [False, True])
@pytest.mark.parametrize("share_params", [False, True])
@pytest.mark.parametrize("act", [nn.Tanh, nn.ReLU, nn.ELU])
def test_gradients_match_per_agent_loop(
    centralized: bool, share_params: bool, act: type[nn.Module]
) -> None:
    # Activations may run in place on fresh layer outputs: the backward must not change.
    mlp = MultiAgentMLP(
        N_IN,
        N_OUT,
        N_AGENTS,
        centralized=centralized,
        share_params=share_params,
        num_cells=[8, 6],
        activation_class=act,
    )
    x = torch.randn(2, 5, N_AGENTS, N_IN, requires_grad=True)
    inputs = [x, *mlp.parameters()]
    got = torch.autograd.grad(mlp(x).pow(2).sum(), inputs)
    want = torch.autograd.grad(_reference(mlp, x, act).pow(2).sum(), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_runs_under_vmap_over_stacked_parameters() -> None:
    # How QEnsemble evaluates several critics: torch.vmap over stacked weights.
    mlps = [
        MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=True, share_params=False, depth=1)
        for _ in range(2)
    ]
    stacked = TensorDict.from_modules(*mlps, as_module=False)
    x = torch.randn(4, N_AGENTS, N_IN)

    def call(params: TensorDict) -> torch.Tensor:
        with params.to_module(mlps[0]):
            return mlps[0](x)

    out = torch.vmap(call)(stacked)
    with torch.no_grad():
        torch.testing.assert_close(out, torch.stack([m(x) for m in mlps]))


def test_agents_differ_unless_shared() -> None:
    x = torch.randn(7, 1, N_IN).expand(7, N_AGENTS, N_IN)
    own = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=False, share_params=False, depth=1)
    shared = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=False, share_params=True, depth=1)
    assert not torch.allclose(own(x)[:, 0], own(x)[:, 1])
    torch.testing.assert_close(shared(x)[:, 0], shared(x)[:, 1])


def test_parameter_layout_follows_mlp() -> None:
    # Same depth/num_cells defaults as MLP: no depth means one linear layer; depth=1 gives
    # one hidden layer of 32 cells. Weights stack over agents unless shared.
    mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=False, share_params=False)
    assert {k: tuple(v.shape) for k, v in mlp.state_dict().items()} == {
        "params.0.weight": (N_AGENTS, N_OUT, N_IN),
        "params.0.bias": (N_AGENTS, N_OUT),
    }
    mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=True, share_params=True, depth=1)
    assert {k: tuple(v.shape) for k, v in mlp.state_dict().items()} == {
        "params.0.weight": (32, N_AGENTS * N_IN),
        "params.0.bias": (32,),
        "params.2.weight": (N_OUT, 32),
        "params.2.bias": (N_OUT,),
    }
    kwargs = {"centralized": False, "share_params": True, "use_td_params": False}
    mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, depth=1, dropout=0.0, **kwargs)
    assert sorted(mlp.state_dict()) == [
        "_empty_net.0.bias",
        "_empty_net.0.weight",
        "_empty_net.3.bias",
        "_empty_net.3.weight",
    ]


def test_gradients_reach_every_agent() -> None:
    mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=True, share_params=False, depth=1)
    mlp(torch.randn(5, N_AGENTS, N_IN)).sum().backward()
    grad = mlp.state_dict(keep_vars=True)["params.0.weight"].grad
    assert grad is not None and bool((grad.abs().sum((1, 2)) > 0).all())


def test_lazy_inputs_and_mlp_options() -> None:
    mlp = MultiAgentMLP(
        None,
        N_OUT,
        N_AGENTS,
        centralized=False,
        share_params=False,
        num_cells=[5],
        activation_class=nn.ReLU,
        bias_last_layer=False,
        activate_last_layer=True,
    )
    x = torch.randn(6, N_AGENTS, N_IN)
    out = mlp(x)
    assert mlp.state_dict()["params.0.weight"].shape == (N_AGENTS, 5, N_IN)
    assert "params.2.bias" not in mlp.state_dict()
    assert bool((out >= 0).all())
    ref = _reference(mlp, x, nn.ReLU).relu()
    torch.testing.assert_close(out, ref)


def test_centralised_spelling_and_reset() -> None:
    mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralised=True, share_params=False)
    assert mlp.centralized
    before = mlp.state_dict()["params.0.weight"].clone()
    mlp.reset_parameters()
    assert not torch.equal(before, mlp.state_dict()["params.0.weight"])


def test_errors() -> None:
    with pytest.raises(TypeError, match="centralized is missing"):
        MultiAgentMLP(N_IN, N_OUT, N_AGENTS, share_params=True)
    with pytest.raises(TypeError, match="share_params is missing"):
        MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=True)
    with pytest.raises(ValueError, match="norm_class is not supported"):
        MultiAgentMLP(
            N_IN, N_OUT, N_AGENTS, centralized=True, share_params=True, norm_class=nn.LayerNorm
        )
    with pytest.raises(TypeError, match="unknown arguments"):
        MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=True, share_params=True, widht=3)
    mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=False, share_params=False)
    with pytest.raises(ValueError, match="agent dim is wrong"):
        mlp(torch.zeros(5, N_AGENTS + 1, N_IN))
    for centralized in (False, True):
        mlp = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=centralized, share_params=False)
        with pytest.raises(ValueError, match=rf"input features.*\(\*batch, {N_AGENTS}, {N_IN}\)"):
            mlp(torch.zeros(5, N_AGENTS, N_IN + 1))
        assert mlp(torch.zeros(5, N_AGENTS, N_IN)).shape == (5, N_AGENTS, N_OUT)
