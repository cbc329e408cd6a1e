"""DTLoss and OnlineDTLoss: TorchRL's values and gradients on the same actor outputs.

The actors are linear stubs (as in tools/dt_reference/gen_dt_losses.py, which recorded TorchRL
0.14.1's outputs into dt_fixtures/dt_losses.safetensors), so both libraries see the same
actions and distributions; plus a small training run of a real Decision Transformer.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.modules import DTActor, ProbabilisticActor, TanhDelta, TanhNormal
from tdrl.objectives import DTLoss, OnlineDTLoss
from tdrl.specs import Bounded

FIXTURE = pathlib.Path(__file__).parent / "dt_fixtures" / "dt_losses.safetensors"
REF = load_file(str(FIXTURE))
with safe_open(str(FIXTURE), "pt") as _f:
    META = json.loads(_f.metadata()["meta"])


class GaussianStub(torch.nn.Module):
    """loc and scale (softplus + 0.1) from one linear layer (the generator's stub)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.linear(observation)
        return out[..., :2], torch.nn.functional.softplus(out[..., 2:]) + 0.1


def linear_with(weight: torch.Tensor, bias: torch.Tensor) -> torch.nn.Linear:
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return linear


def dt_actor(linear: torch.nn.Module) -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(linear, in_keys=["observation"], out_keys=["param"]),
        in_keys=["param"],
        out_keys=["action"],
        distribution_class=TanhDelta,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        spec=Bounded(-1.0, 1.0, (2,)),
    )


def online_actor(stub: GaussianStub) -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(stub, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        out_keys=["action"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        spec=Bounded(-1.0, 1.0, (2,)),
    )


def batch(masked: bool) -> TensorDict:
    td = TensorDict(
        observation=REF["dt.batch.observation"], action=REF["dt.batch.action"], batch_size=[4, 6]
    )
    if masked:
        td["collector", "mask"] = REF["dt.batch.mask"]
    return td


def assert_outputs(out: TensorDict, name: str) -> None:
    keys = sorted(k for k, v in out.items(True, True) if isinstance(v, torch.Tensor))
    assert keys == META[f"{name}.keys"]
    for key in keys:
        torch.testing.assert_close(out[key], REF[f"{name}.{key}"], rtol=1e-5, atol=1e-6)


DT_CASES = {
    "l2_mean": ({}, False),
    "l1_sum": ({"loss_function": "l1", "reduction": "sum"}, False),
    "smooth_l1_none": ({"loss_function": "smooth_l1", "reduction": "none"}, False),
    "l2_mean_masked": ({}, True),
    "l2_none_masked": ({"reduction": "none"}, True),
}


@pytest.mark.parametrize("name", list(DT_CASES))
def test_dt_loss_matches_torchrl(name: str) -> None:
    kwargs, masked = DT_CASES[name]
    linear = linear_with(REF["dt.weight"], REF["dt.bias"])
    loss = DTLoss(dt_actor(linear), **kwargs)
    td = batch(masked)
    before = td.clone()
    out = loss(td)
    assert [str(k) for k in loss.in_keys] == META[f"dt.{name}.in_keys"]
    assert_outputs(out, f"dt.{name}")
    out["loss"].sum().backward()
    torch.testing.assert_close(linear.weight.grad, REF[f"dt.{name}.grad"], rtol=1e-5, atol=1e-6)
    assert (td == before).all()  # the batch keeps its dataset actions


ONLINE_CASES = {
    "default": ({}, False),
    "mc3": ({"samples_mc_entropy": 3, "alpha_init": 0.5}, False),
    "bounds": ({"min_alpha": 0.7, "alpha_init": 0.5, "target_entropy": -1.5}, False),
    "fixed_sum": ({"fixed_alpha": True, "alpha_init": 2.0, "reduction": "sum"}, False),
    "masked": ({"samples_mc_entropy": 2}, True),
    "none": ({"reduction": "none", "scalar_output_mode": "exclude"}, False),
}


@pytest.mark.parametrize("name", list(ONLINE_CASES))
def test_online_dt_loss_matches_torchrl(name: str) -> None:
    kwargs, masked = ONLINE_CASES[name]
    stub = GaussianStub()
    stub.linear = linear_with(REF["odt.weight"], REF["odt.bias"])
    loss = OnlineDTLoss(online_actor(stub), **kwargs)
    assert float(loss.target_entropy) == META[f"odt.{name}.target_entropy"]
    assert [str(k) for k in loss.in_keys] == META[f"odt.{name}.in_keys"]
    torch.manual_seed(7)  # the same entropy draws as TorchRL's
    out = loss(batch(masked))
    assert_outputs(out, f"odt.{name}")
    total = out["loss_log_likelihood"].sum() + out["loss_entropy"].sum()
    (total + out["loss_alpha"].sum()).backward()
    grad = REF[f"odt.{name}.grad"]
    torch.testing.assert_close(stub.linear.weight.grad, grad, rtol=1e-5, atol=1e-6)
    if not loss.fixed_alpha:
        torch.testing.assert_close(loss.log_alpha.grad, REF[f"odt.{name}.log_alpha_grad"])


def test_online_dt_loss_options() -> None:
    stub = GaussianStub()
    loss = OnlineDTLoss(online_actor(stub), reduction="none", scalar_output_mode="non_tensor")
    out = loss(batch(False))
    assert out.batch_size == (4, 6) and out["loss_alpha"].shape == (4, 6)
    assert float(out.get_non_tensor("alpha")) == 1.0
    fixed = OnlineDTLoss(online_actor(stub), fixed_alpha=True)
    assert "log_alpha" in dict(fixed.named_buffers())
    assert "log_alpha" not in dict(fixed.named_parameters(recurse=False))
    assert OnlineDTLoss(online_actor(stub)).out_keys == [
        "loss_log_likelihood",
        "loss_entropy",
        "loss_alpha",
        "alpha",
        "entropy",
    ]
    bounded = OnlineDTLoss(online_actor(stub), max_alpha=0.5)  # min gets 0 (no lower bound)
    assert bounded.min_log_alpha is None and float(bounded.alpha) == 0.5


def test_loss_errors() -> None:
    stub = GaussianStub()
    with pytest.raises(ValueError, match="unknown reduction 'max'"):
        DTLoss(dt_actor(torch.nn.Linear(3, 2)), reduction="max")
    with pytest.raises(ValueError, match="unknown loss_function"):
        DTLoss(dt_actor(torch.nn.Linear(3, 2)), loss_function="huber")
    with pytest.raises(ValueError, match="max_alpha must be None or > 0"):
        OnlineDTLoss(online_actor(stub), min_alpha=0.1, max_alpha=0)
    with pytest.raises(ValueError, match="scalar_output_mode"):
        OnlineDTLoss(online_actor(stub), scalar_output_mode="tensor")
    no_spec = ProbabilisticActor(
        TensorDictModule(stub, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
    )
    with pytest.raises(RuntimeError, match="cannot infer the target entropy"):
        OnlineDTLoss(no_spec)
    loss = OnlineDTLoss(online_actor(stub))
    td = batch(False)
    td["action"] = td["action"].requires_grad_()
    with pytest.raises(RuntimeError, match="part of a graph"):
        loss(td)
    with pytest.raises(KeyError, match="missing key 'action'"):
        loss(batch(False).exclude("action"))


def test_decision_transformer_fits_a_small_dataset() -> None:
    """A tiny DT learns the actions of a fixed dataset: its loss drops well below the start."""
    torch.manual_seed(0)
    config = DTActor.default_config()
    config.n_embd, config.n_layer, config.n_head, config.n_inner = 32, 1, 2, 64
    config.resid_pdrop = config.attn_pdrop = 0.0
    net = TensorDictModule(
        DTActor(3, 2, config),
        in_keys=["observation", "action", "return_to_go"],
        out_keys=["param"],
    )
    actor = ProbabilisticActor(
        net,
        in_keys=["param"],
        distribution_class=TanhDelta,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        spec=Bounded(-1.0, 1.0, (2,)),
    )
    obs = torch.randn(16, 8, 3)
    data = TensorDict(
        observation=obs,
        action=torch.tanh(obs[..., :2] - obs[..., 2:]),  # a function of the observation
        return_to_go=torch.randn(16, 8, 1),
        batch_size=[16, 8],
    )
    loss = DTLoss(actor)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-3)
    first = loss(data)["loss"].item()
    for _ in range(150):
        value = loss(data)["loss"]
        optim.zero_grad()
        value.backward()
        optim.step()
    assert loss(data)["loss"].item() < 0.1 * first
