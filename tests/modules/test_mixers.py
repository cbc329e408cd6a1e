"""VDNMixer and QMixer against plain per-sample reference computations."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.nn import functional as F

from tdrl.modules import QMixer, VDNMixer
from tdrl.modules.models import QMixer as QMixerFromModels

N_AGENTS, STATE, EMBED = 3, 5, 4


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def _qmix_reference(mixer: QMixer, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """QMIX for one sample at a time, from the mixer's state dict."""
    p = mixer.state_dict()
    q_rows = q.reshape(-1, N_AGENTS)
    s_rows = state.reshape(q_rows.shape[0], -1)
    outs = []
    for qi, si in zip(q_rows, s_rows):
        w1 = (p["hyper_w_1.weight"] @ si + p["hyper_w_1.bias"]).abs().reshape(N_AGENTS, EMBED)
        b1 = p["hyper_b_1.weight"] @ si + p["hyper_b_1.bias"]
        hidden = F.elu(qi @ w1 + b1)
        w2 = (p["hyper_w_final.weight"] @ si + p["hyper_w_final.bias"]).abs()
        v = p["V.2.weight"] @ torch.relu(p["V.0.weight"] @ si + p["V.0.bias"]) + p["V.2.bias"]
        outs.append(hidden @ w2 + v)
    return torch.stack(outs).reshape(*q.shape[:-2], 1)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_vdn_sums_the_agents(batch: tuple[int, ...]) -> None:
    q = torch.randn(*batch, N_AGENTS, 1)
    out = VDNMixer(N_AGENTS, "cpu")(q)
    expected = q[..., 0, :] + q[..., 1, :] + q[..., 2, :]
    assert out.shape == (*batch, 1)
    torch.testing.assert_close(out, expected)
    assert list(VDNMixer(N_AGENTS).parameters()) == []


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_qmixer_matches_reference(batch: tuple[int, ...]) -> None:
    mixer = QMixer((STATE,), EMBED, N_AGENTS, "cpu")
    q, state = torch.randn(*batch, N_AGENTS, 1), torch.randn(*batch, STATE)
    out = mixer(q, state)
    assert out.shape == (*batch, 1)
    torch.testing.assert_close(out, _qmix_reference(mixer, q, state))


def test_qmixer_multi_dim_state_is_flattened() -> None:
    # e.g. the stacked agents' observations as the state: [*B, n_agents, obs]
    mixer = QMixer(state_shape=(N_AGENTS, 2), mixing_embed_dim=EMBED, n_agents=N_AGENTS)
    q, state = torch.randn(7, N_AGENTS, 1), torch.randn(7, N_AGENTS, 2)
    assert mixer.state_dim == 6
    torch.testing.assert_close(mixer(q, state), _qmix_reference(mixer, q, state))


def test_qmixer_is_monotonic_in_every_agent_value() -> None:
    mixer = QMixer(STATE, EMBED, N_AGENTS)
    with torch.no_grad():  # large hypernetwork outputs of both signs
        for p in mixer.parameters():
            p.normal_(0.0, 2.0)
    q = torch.randn(64, N_AGENTS, 1, requires_grad=True)
    mixer(q, torch.randn(64, STATE)).sum().backward()
    assert q.grad is not None and bool((q.grad >= 0).all())
    # Raising one agent's value never lowers the mix.
    base = torch.randn(64, N_AGENTS, 1)
    state = torch.randn(64, STATE)
    higher = base.clone()
    higher[:, 1] += 0.5
    assert bool((mixer(higher, state) >= mixer(base, state) - 1e-6).all())


def test_qmixer_parameters_have_torchrl_names_and_get_gradients() -> None:
    mixer = QMixerFromModels((STATE,), EMBED, N_AGENTS, None)
    shapes = {k: tuple(v.shape) for k, v in mixer.state_dict().items()}
    assert shapes == {
        "hyper_w_1.weight": (EMBED * N_AGENTS, STATE),
        "hyper_w_1.bias": (EMBED * N_AGENTS,),
        "hyper_w_final.weight": (EMBED, STATE),
        "hyper_w_final.bias": (EMBED,),
        "hyper_b_1.weight": (EMBED, STATE),
        "hyper_b_1.bias": (EMBED,),
        "V.0.weight": (EMBED, STATE),
        "V.0.bias": (EMBED,),
        "V.2.weight": (1, EMBED),
        "V.2.bias": (1,),
    }
    assert (mixer.n_agents, mixer.state_shape, mixer.embed_dim, mixer.needs_state) == (
        N_AGENTS,
        (STATE,),
        EMBED,
        True,
    )
    mixer(torch.randn(8, N_AGENTS, 1), torch.randn(8, STATE)).sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0), name


def test_mixers_in_tensordict_modules_with_nested_keys() -> None:
    td = TensorDict(
        {
            "agents": {"chosen_action_value": torch.randn(4, N_AGENTS, 1)},
            "state": torch.randn(4, 5),
        },
        batch_size=[4],
    )
    qmix = TensorDictModule(
        QMixer((STATE,), EMBED, N_AGENTS),
        [("agents", "chosen_action_value"), "state"],
        ["chosen_action_value"],
    )
    vdn = TensorDictModule(VDNMixer(N_AGENTS), [("agents", "chosen_action_value")], ["vdn_value"])
    out = vdn(qmix(td))
    assert out["chosen_action_value"].shape == out["vdn_value"].shape == (4, 1)
    torch.testing.assert_close(out["vdn_value"], td["agents", "chosen_action_value"].sum(1))


def test_errors() -> None:
    mixer = QMixer((STATE,), EMBED, N_AGENTS)
    q = torch.randn(4, N_AGENTS, 1)
    with pytest.raises(ValueError, match="chosen_action_value has the wrong shape"):
        mixer(torch.randn(4, N_AGENTS), torch.randn(4, STATE))
    with pytest.raises(ValueError, match="state has the wrong shape"):
        mixer(q, torch.randn(4, STATE + 1))
    with pytest.raises(ValueError, match="different batch dims"):
        mixer(q, torch.randn(6, STATE))
    with pytest.raises(ValueError, match="wrong number of inputs"):
        mixer(q)
    with pytest.raises(ValueError, match="wrong number of inputs"):
        VDNMixer(N_AGENTS)(q, torch.randn(4, STATE))
    with pytest.raises(ValueError, match="chosen_action_value has the wrong shape"):
        VDNMixer(N_AGENTS)(torch.randn(4, N_AGENTS + 1, 1))
    with pytest.raises(ValueError, match="state_shape must be positive"):
        QMixer((0,), EMBED, N_AGENTS)
    with pytest.raises(ValueError, match="mixing_embed_dim must be"):
        QMixer(STATE, 0, N_AGENTS)
    with pytest.raises(ValueError, match="n_agents must be"):
        VDNMixer(0)
    assert mixer(q, torch.randn(4, STATE)).shape == (4, 1)  # still usable
