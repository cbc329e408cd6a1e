"""Records TorchRL 0.14.1's DTLoss and OnlineDTLoss outputs on stub actors for tdrl's tests.

Run it in the throwaway venv that has torchrl (never a tdrl dependency):

    /tmp/trl-venv/bin/python tools/dt_reference/gen_dt_losses.py

The actors are small linear stubs (the same code is written in tests/objectives/test_dt_loss.py),
so both libraries compute the losses from the same actor outputs. Writes
``tests/objectives/dt_fixtures/dt_losses.safetensors``: the stub weights, the batches, every
output entry and the stub's gradients.
"""

from __future__ import annotations

import json
import pathlib

import torch
from safetensors.torch import save_file
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.data import Bounded
from torchrl.modules import ProbabilisticActor, TanhDelta, TanhNormal
from torchrl.objectives import DTLoss, OnlineDTLoss

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/objectives/dt_fixtures"


class GaussianStub(torch.nn.Module):
    """loc and scale (softplus + 0.1) from one linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, observation):
        out = self.linear(observation)
        return out[..., :2], torch.nn.functional.softplus(out[..., 2:]) + 0.1


def dt_actor(linear: torch.nn.Linear) -> ProbabilisticActor:
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
    torch.manual_seed(3)
    td = TensorDict(
        observation=torch.randn(4, 6, 3), action=torch.rand(4, 6, 2) * 1.8 - 0.9, batch_size=[4, 6]
    )
    if masked:
        mask = torch.ones(4, 6, 1, dtype=torch.bool)
        mask[1, 4:] = mask[3, 2:] = False
        td["collector", "mask"] = mask
    return td


def save_out(tensors: dict, name: str, out: TensorDict) -> list[str]:
    keys = []
    for key, value in out.items(True, True):
        if isinstance(value, torch.Tensor):
            tensors[f"{name}.{key}"] = value.detach().contiguous()
            keys.append(key)
    return sorted(keys)


def dt_cases(tensors: dict, meta: dict) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)
    tensors["dt.weight"], tensors["dt.bias"] = linear.weight.detach(), linear.bias.detach()
    for name, kwargs, masked in (
        ("l2_mean", {}, False),
        ("l1_sum", {"loss_function": "l1", "reduction": "sum"}, False),
        ("smooth_l1_none", {"loss_function": "smooth_l1", "reduction": "none"}, False),
        ("l2_mean_masked", {}, True),
        ("l2_none_masked", {"reduction": "none"}, True),
    ):
        linear.zero_grad()
        loss = DTLoss(dt_actor(linear), **kwargs)
        td = batch(masked)
        out = loss(td)
        meta[f"dt.{name}.keys"] = save_out(tensors, f"dt.{name}", out)
        meta[f"dt.{name}.in_keys"] = [str(k) for k in loss.in_keys]
        out["loss"].sum().backward()
        tensors[f"dt.{name}.grad"] = linear.weight.grad.clone()
    tensors["dt.batch.observation"] = batch(True)["observation"]
    tensors["dt.batch.action"] = batch(True)["action"]
    tensors["dt.batch.mask"] = batch(True)["collector", "mask"]


def online_cases(tensors: dict, meta: dict) -> None:
    torch.manual_seed(0)
    stub = GaussianStub()
    tensors["odt.weight"] = stub.linear.weight.detach()
    tensors["odt.bias"] = stub.linear.bias.detach()
    for name, kwargs, masked in (
        ("default", {}, False),
        ("mc3", {"samples_mc_entropy": 3, "alpha_init": 0.5}, False),
        ("bounds", {"min_alpha": 0.7, "alpha_init": 0.5, "target_entropy": -1.5}, False),
        ("fixed_sum", {"fixed_alpha": True, "alpha_init": 2.0, "reduction": "sum"}, False),
        ("masked", {"samples_mc_entropy": 2}, True),
        ("none", {"reduction": "none", "scalar_output_mode": "exclude"}, False),
    ):
        stub.zero_grad()
        loss = OnlineDTLoss(online_actor(stub), **kwargs)
        td = batch(masked)
        torch.manual_seed(7)
        out = loss(td)
        meta[f"odt.{name}.keys"] = save_out(tensors, f"odt.{name}", out)
        meta[f"odt.{name}.in_keys"] = [str(k) for k in loss.in_keys]
        meta[f"odt.{name}.target_entropy"] = float(loss.target_entropy)
        total = out["loss_log_likelihood"].sum() + out["loss_entropy"].sum()
        (total + out["loss_alpha"].sum()).backward()
        tensors[f"odt.{name}.grad"] = stub.linear.weight.grad.clone()
        if not loss.fixed_alpha:
            tensors[f"odt.{name}.log_alpha_grad"] = loss.log_alpha.grad.clone()


def main() -> None:
    tensors: dict[str, torch.Tensor] = {}
    meta: dict = {}
    dt_cases(tensors, meta)
    online_cases(tensors, meta)
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT / "dt_losses.safetensors"), metadata={"meta": json.dumps(meta)})
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
