"""DecisionTransformer: TorchRL's outputs on the same weights, causality, shapes, config, errors.

The reference outputs come from TorchRL 0.14.1 (HuggingFace GPT2Model inside), recorded by
tools/dt_reference/gen_dt_models.py into dt_fixtures/dt_models.safetensors.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from tdrl.modules import DecisionTransformer
from tdrl.modules.models._decision_transformer import DTConfig

FIXTURE = pathlib.Path(__file__).parent / "dt_fixtures" / "dt_models.safetensors"
SMALL = DTConfig(n_embd=16, n_layer=2, n_head=2, n_inner=32, n_positions=60)


def load_reference() -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
    with safe_open(str(FIXTURE), "pt") as f:
        cases = json.loads(f.metadata()["cases"])
    return load_file(str(FIXTURE)), cases


def weights(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def inputs(tensors: dict[str, torch.Tensor], case: str) -> tuple[torch.Tensor, ...]:
    return tuple(tensors[f"{case}.in.{k}"] for k in ("observation", "action", "return_to_go"))


@pytest.mark.parametrize("case", ["relu", "gelu_new"])
def test_matches_torchrl_on_the_same_weights(case: str) -> None:
    tensors, cases = load_reference()
    config = DecisionTransformer.DTConfig(**cases[case])
    model = DecisionTransformer(state_dim=4, action_dim=2, config=config).eval()
    # Same parameter names and shapes as TorchRL's (GPT-2 layout): strict loading.
    model.load_state_dict(weights(tensors, f"{case}.model.w."), strict=True)
    out = model(*inputs(tensors, case))  # batch [2, 3], T = 5
    torch.testing.assert_close(out, tensors[f"{case}.model.out0"], rtol=1e-5, atol=1e-5)


def test_state_tokens_never_see_the_present_or_future_actions() -> None:
    torch.manual_seed(0)
    model = DecisionTransformer(3, 2, SMALL).eval()
    obs, act, rtg = torch.randn(2, 6, 3), torch.randn(2, 6, 2), torch.randn(2, 6, 1)
    ref = model(obs, act, rtg)
    for t in range(6):
        act2 = act.clone()
        act2[:, t:] += 10.0  # a_t and later change
        out = model(obs, act2, rtg)
        torch.testing.assert_close(out[:, : t + 1], ref[:, : t + 1])
        if t < 5:
            assert not torch.allclose(out[:, t + 1 :], ref[:, t + 1 :])
        obs2 = obs.clone()
        obs2[:, t] += 1.0  # s_t changes: the output at t and later change, earlier ones do not
        out = model(obs2, act, rtg)
        torch.testing.assert_close(out[:, :t], ref[:, :t])
        assert not torch.allclose(out[:, t], ref[:, t])
        rtg2 = rtg.clone()
        rtg2[:, t] += 1.0
        out = model(obs, act, rtg2)
        torch.testing.assert_close(out[:, :t], ref[:, :t])
        assert not torch.allclose(out[:, t], ref[:, t])


@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_batch_dims_are_kept_and_rows_are_independent(batch: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = DecisionTransformer(3, 2, SMALL).eval()
    obs, act, rtg = torch.randn(*batch, 4, 3), torch.randn(*batch, 4, 2), torch.randn(*batch, 4, 1)
    out = model(obs, act, rtg)
    assert out.shape == (*batch, 4, 16)
    flat = [x.reshape(-1, *x.shape[-2:]) for x in (obs, act, rtg)]
    rows = [model(o[None], a[None], r[None])[0] for o, a, r in zip(*flat)]
    torch.testing.assert_close(out.reshape(-1, 4, 16), torch.stack(rows), rtol=1e-5, atol=1e-5)


def test_default_config_is_torchrl() -> None:
    config = DecisionTransformer.default_config()
    assert dataclasses.asdict(config) == dict(
        n_embd=256,
        n_layer=4,
        n_head=4,
        n_inner=1024,
        activation="relu",
        n_positions=1024,
        resid_pdrop=0.1,
        attn_pdrop=0.1,
    )
    config.n_embd = 128
    assert repr(config) == (
        "DTConfig(n_embd: 128, n_layer: 4, n_head: 4, n_inner: 1024, activation: relu, "
        "n_positions: 1024, resid_pdrop: 0.1, attn_pdrop: 0.1)"
    )
    assert DecisionTransformer.default_config().n_embd == 256  # a new object each time


def test_config_as_dict_and_sizes() -> None:
    fields = dataclasses.asdict(SMALL) | {"n_inner": None, "n_layer": 3}
    model = DecisionTransformer(5, 1, fields)
    assert model.hidden_size == 16 and model.state_dim == 5 and model.action_dim == 1
    assert len(model.transformer.h) == 3
    assert model.transformer.h[0].mlp.c_fc.out_features == 64  # n_inner None: 4 * n_embd
    assert model.transformer.wpe.num_embeddings == 60


def test_dropout_only_in_training_mode() -> None:
    torch.manual_seed(0)
    model = DecisionTransformer(3, 2, dataclasses.replace(SMALL, attn_pdrop=0.5, resid_pdrop=0.5))
    x = (torch.randn(2, 4, 3), torch.randn(2, 4, 2), torch.randn(2, 4, 1))
    assert not torch.equal(model(*x), model(*x))
    model.eval()
    assert torch.equal(model(*x), model(*x))


def test_gpt2_initialisation() -> None:
    torch.manual_seed(0)
    config = DTConfig(n_embd=64, n_layer=8, n_head=4, n_inner=256, n_positions=512)
    body = DecisionTransformer(3, 2, config).transformer
    assert abs(body.wpe.weight.std().item() - 0.02) < 0.002
    assert abs(body.h[0].attn.c_attn.weight.std().item() - 0.02) < 0.002
    scaled = 0.02 / (2 * 8) ** 0.5  # residual projections: 0.02 / sqrt(2 * n_layer)
    assert abs(body.h[0].mlp.c_proj.weight.std().item() - scaled) < 0.0005
    assert torch.equal(body.h[0].attn.c_attn.bias, torch.zeros(192))


def test_device_argument() -> None:
    model = DecisionTransformer(3, 2, SMALL, device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_errors() -> None:
    with pytest.raises(ValueError, match="unknown activation 'swoosh'"):
        DecisionTransformer(3, 2, dataclasses.replace(SMALL, activation="swoosh"))
    with pytest.raises(ValueError, match="n_embd is not divisible by n_head"):
        DecisionTransformer(3, 2, dataclasses.replace(SMALL, n_head=3))
    with pytest.raises(KeyError, match="config misses"):
        DecisionTransformer(3, 2, {"n_embd": 16})
    with pytest.raises(TypeError, match="config is not a DTConfig"):
        DecisionTransformer(3, 2, 16)  # type: ignore[arg-type]
    model = DecisionTransformer(3, 2, SMALL)
    with pytest.raises(ValueError, match="too long"):
        model(torch.zeros(1, 21, 3), torch.zeros(1, 21, 2), torch.zeros(1, 21, 1))
    with pytest.raises(ValueError, match="observation has shape"):
        model(torch.zeros(1, 4, 5), torch.zeros(1, 4, 2), torch.zeros(1, 4, 1))
    with pytest.raises(ValueError, match="leading dims differ"):
        model(torch.zeros(1, 4, 3), torch.zeros(1, 5, 2), torch.zeros(1, 4, 1))
