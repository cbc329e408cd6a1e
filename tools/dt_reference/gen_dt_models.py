"""Records TorchRL 0.14.1's Decision Transformer outputs for tdrl's differential tests.

Run it in the throwaway venv that has torchrl and transformers (never a tdrl dependency):

    /tmp/trl-venv/bin/python tools/dt_reference/gen_dt_models.py

It builds TorchRL's ``DecisionTransformer``, ``DTActor`` and ``OnlineDTActor`` (HuggingFace's
GPT2Model inside) on small seeded configurations, and writes, per case, the weights in tdrl's
layout (GPT-2's ``Conv1D`` weights transposed to ``nn.Linear``'s, the unused token embedding
``wte`` dropped), the inputs and the outputs in eval mode to
``tests/modules/dt_fixtures/dt_models.safetensors`` (read by tests/modules/test_decision_transformer.py
and tests/modules/test_dt_actor.py).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

# torchvision in the throwaway venv does not load with its torch; transformers only needs it
# for image models, so it is hidden.
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a, **k: (  # type: ignore[assignment]
    None if name.split(".")[0] == "torchvision" else _find_spec(name, *a, **k)
)
sys.modules["torchvision"] = None  # type: ignore[assignment]

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.modules import (  # noqa: E402
    DecisionTransformer,
    DecisionTransformerInferenceWrapper,
    DTActor,
    OnlineDTActor,
)

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/modules/dt_fixtures"
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

CASES = {
    "relu": dict(n_embd=16, n_layer=2, n_head=2, n_inner=32, activation="relu", n_positions=30),
    "gelu_new": dict(
        n_embd=12, n_layer=1, n_head=3, n_inner=None, activation="gelu_new", n_positions=18
    ),
}


def tdrl_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, value in state.items():
        if name.endswith("transformer.wte.weight"):
            continue
        if name.endswith(CONV1D):
            value = value.t()
        out[name] = value.contiguous().clone()
    return out


class Recorder(torch.nn.Module):
    """A stub policy: keeps what it was given, returns an action that depends on all of it."""

    def forward(self, observation, action, return_to_go):
        self.seen = (observation.clone(), action.clone(), return_to_go.clone())
        return action * 2 + observation.sum(-1, keepdim=True) + return_to_go


def wrapper_cases(tensors: dict[str, torch.Tensor]) -> None:
    """The inference wrapper's masked inputs and outputs (T=6) for several contexts."""
    torch.manual_seed(2)
    obs, act, rtg = torch.randn(2, 6, 3), torch.randn(2, 6, 2), torch.randn(2, 6, 1)
    tensors.update({"wrapper.in.observation": obs, "wrapper.in.action": act})
    tensors["wrapper.in.return_to_go"] = rtg
    for k in (1, 2, 3, 5, 6, 8):
        rec = Recorder()
        module = TensorDictModule(
            rec, in_keys=["observation", "action", "return_to_go"], out_keys=["action"]
        )
        wrapper = DecisionTransformerInferenceWrapper(module, inference_context=k)
        td = TensorDict(observation=obs, action=act, return_to_go=rtg, batch_size=[2])
        out = wrapper(td)
        for name, value in zip(("observation", "action", "return_to_go"), rec.seen):
            tensors[f"wrapper.ctx{k}.seen.{name}"] = value
        tensors[f"wrapper.ctx{k}.out.action"] = out["action"].contiguous()
        tensors[f"wrapper.ctx{k}.out.return_to_go"] = out["return_to_go"].contiguous()


def main() -> None:
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, dict] = {}
    for case, fields in CASES.items():
        config = DecisionTransformer.DTConfig(**fields, resid_pdrop=0.1, attn_pdrop=0.1)
        torch.manual_seed(0)
        obs, act, rtg = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 2), torch.randn(2, 3, 5, 1)
        tensors.update({f"{case}.in.observation": obs, f"{case}.in.action": act})
        tensors[f"{case}.in.return_to_go"] = rtg
        for kind, cls in (
            ("model", DecisionTransformer),
            ("dt_actor", DTActor),
            ("online_actor", OnlineDTActor),
        ):
            torch.manual_seed(1)
            if kind == "model":
                net = cls(state_dim=4, action_dim=2, config=config)
            else:
                net = cls(state_dim=4, action_dim=2, transformer_config=config)
            net.eval()
            with torch.no_grad():
                out = net(obs, act, rtg)
            outs = out if isinstance(out, tuple) else (out,)
            for i, value in enumerate(outs):
                tensors[f"{case}.{kind}.out{i}"] = value.contiguous()
            for name, value in tdrl_layout(net.state_dict()).items():
                tensors[f"{case}.{kind}.w.{name}"] = value
        meta[case] = fields
    wrapper_cases(tensors)
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT / "dt_models.safetensors"), metadata={"cases": json.dumps(meta)})


if __name__ == "__main__":
    main()
