"""DTActor, OnlineDTActor and DecisionTransformerInferenceWrapper against TorchRL 0.14.1.

Reference outputs (same weights) and the wrapper's masked inputs were recorded by
tools/dt_reference/gen_dt_models.py into dt_fixtures/dt_models.safetensors.
"""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import torch
from safetensors.torch import load_file
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.envs import (
    CatFrames,
    Compose,
    TargetReturn,
    TensorDictPrimer,
    TransformedEnv,
    UnsqueezeTransform,
)
from tdrl.modules import (
    DecisionTransformer,
    DecisionTransformerInferenceWrapper,
    DTActor,
    OnlineDTActor,
    ProbabilisticActor,
    TanhDelta,
)
from tdrl.specs import Bounded
from tdrl.testing import CountingEnv

REF = load_file(str(pathlib.Path(__file__).parent / "dt_fixtures" / "dt_models.safetensors"))
CASES = {
    "relu": dict(n_embd=16, n_layer=2, n_head=2, n_inner=32, activation="relu", n_positions=30),
    "gelu_new": dict(
        n_embd=12, n_layer=1, n_head=3, n_inner=None, activation="gelu_new", n_positions=18
    ),
}


def weights(prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in REF.items() if k.startswith(prefix)}


def inputs(case: str) -> tuple[torch.Tensor, ...]:
    return tuple(REF[f"{case}.in.{k}"] for k in ("observation", "action", "return_to_go"))


@pytest.mark.parametrize("case", list(CASES))
def test_actors_match_torchrl_on_the_same_weights(case: str) -> None:
    config = DecisionTransformer.DTConfig(**CASES[case])
    actor = DTActor(4, 2, transformer_config=config).eval()
    actor.load_state_dict(weights(f"{case}.dt_actor.w."), strict=True)
    torch.testing.assert_close(actor(*inputs(case)), REF[f"{case}.dt_actor.out0"])
    online = OnlineDTActor(4, 2, transformer_config=dataclasses.asdict(config)).eval()
    online.load_state_dict(weights(f"{case}.online_actor.w."), strict=True)
    mu, std = online(*inputs(case))
    torch.testing.assert_close(mu, REF[f"{case}.online_actor.out0"])
    torch.testing.assert_close(std, REF[f"{case}.online_actor.out1"])


def test_actor_defaults_and_heads() -> None:
    for cls in (DTActor, OnlineDTActor):
        assert dataclasses.asdict(cls.default_config()) == dict(
            n_embd=512,
            n_layer=4,
            n_head=4,
            n_inner=2048,
            activation="relu",
            n_positions=1024,
            resid_pdrop=0.1,
            attn_pdrop=0.1,
        )
    torch.manual_seed(0)
    config = DTActor.default_config()
    config.n_embd, config.n_inner, config.n_layer = 8, 16, 1
    actor = DTActor(3, 8, config)
    w = actor.action_layer.weight
    torch.testing.assert_close(w @ w.T, torch.eye(8), atol=1e-5, rtol=0)  # orthogonal
    assert torch.equal(actor.action_layer.bias, torch.zeros(8))
    online = OnlineDTActor(3, 2, config)
    with torch.no_grad():
        online.action_layer_logstd.weight.mul_(1e4)  # saturate the tanh both ways
        _, std = online(torch.randn(4, 5, 3) * 10, torch.zeros(4, 5, 2), torch.zeros(4, 5, 1))
    assert std.min() >= torch.exp(torch.tensor(-5.0)) - 1e-6
    assert std.max() <= torch.exp(torch.tensor(2.0)) + 1e-5


class Recorder(torch.nn.Module):
    """The generator's stub policy: keeps its inputs, returns an action of all of them."""

    def forward(
        self, observation: torch.Tensor, action: torch.Tensor, return_to_go: torch.Tensor
    ) -> torch.Tensor:
        self.seen = (observation.clone(), action.clone(), return_to_go.clone())
        return action * 2 + observation.sum(-1, keepdim=True) + return_to_go


@pytest.mark.parametrize("context", [1, 2, 3, 5, 6, 8])
def test_inference_wrapper_masks_as_torchrl(context: int) -> None:
    rec = Recorder()
    module = TensorDictModule(
        rec, in_keys=["observation", "action", "return_to_go"], out_keys=["action"]
    )
    wrapper = DecisionTransformerInferenceWrapper(module, inference_context=context)
    obs, act, rtg = (REF[f"wrapper.in.{k}"] for k in ("observation", "action", "return_to_go"))
    td = TensorDict(observation=obs, action=act, return_to_go=rtg, batch_size=[2])
    out = wrapper(td)
    seen = dict(zip(("observation", "action", "return_to_go"), rec.seen))
    for name in ("observation", "return_to_go"):
        torch.testing.assert_close(seen[name], REF[f"wrapper.ctx{context}.seen.{name}"])
    if context > 1:
        torch.testing.assert_close(seen["action"], REF[f"wrapper.ctx{context}.seen.action"])
        torch.testing.assert_close(out["action"], REF[f"wrapper.ctx{context}.out.action"])
    else:  # tdrl zeroes every past action (TorchRL's slice [:-0] zeroes none)
        assert torch.equal(seen["action"], torch.zeros_like(act))
    torch.testing.assert_close(out["return_to_go"], REF[f"wrapper.ctx{context}.out.return_to_go"])
    assert out["observation"] is obs  # unmasked
    assert torch.equal(td["action"], act) and td["return_to_go"].shape == (2, 6, 1)


def test_inference_wrapper_keys_and_time_batch_dim() -> None:
    module = TensorDictModule(Recorder(), in_keys=["obs", "act", "rtg"], out_keys=["act_out"])
    wrapper = DecisionTransformerInferenceWrapper(module)
    with pytest.raises(ValueError, match="out_action"):
        wrapper(TensorDict(obs=torch.zeros(2, 4, 3)))
    with pytest.raises(TypeError, match="unknown key name"):
        wrapper.set_tensor_keys(obs="x")
    wrapper.set_tensor_keys(
        observation="obs", action="act", return_to_go="rtg", out_action="act_out"
    )
    assert wrapper.in_keys == ["obs", "act", "rtg"]
    assert wrapper.out_keys == ["act", "act_out", "obs", "rtg"]
    td = TensorDict(
        obs=torch.randn(2, 4, 3),
        act=torch.randn(2, 4, 1),
        rtg=torch.randn(2, 4, 1),
        batch_size=[2, 4],
    )
    out = wrapper(td)
    assert out.batch_size == (2,) and out["act_out"].shape == (2, 1)
    with pytest.raises(ValueError, match="context windows differ"):
        wrapper(TensorDict(obs=torch.zeros(2, 4, 3), act=torch.zeros(2, 3, 1), rtg=td["rtg"]))
    with pytest.raises(ValueError, match="inference_context must be positive"):
        DecisionTransformerInferenceWrapper(module, inference_context=0)


def test_inference_wrapper_drives_an_env_with_target_return() -> None:
    torch.manual_seed(0)
    base = CountingEnv(batch_size=(2,), max_steps=6)  # reward 1 per step, ends at step 6
    env = TransformedEnv(
        base,
        Compose(
            TargetReturn(10.0, out_keys=["return_to_go_single"]),
            TensorDictPrimer(action=base.action_spec.clone()),
            UnsqueezeTransform(
                -2,
                in_keys=["observation", "action", "return_to_go_single"],
                out_keys=["observation_cat", "action_cat", "return_to_go_cat"],
            ),
            CatFrames(
                N=4,
                dim=-2,
                in_keys=["observation_cat", "action_cat", "return_to_go_cat"],
                padding="constant",
            ),
        ),
    )
    config = DTActor.default_config()
    config.n_embd, config.n_inner, config.n_layer = 16, 32, 1
    net = TensorDictModule(
        DTActor(1, 1, config),
        in_keys=["observation_cat", "action_cat", "return_to_go_cat"],
        out_keys=["param"],
    )
    actor = ProbabilisticActor(
        net,
        in_keys=["param"],
        distribution_class=TanhDelta,
        distribution_kwargs={"low": 0.0, "high": 1.0},
        spec=Bounded(0.0, 1.0, (1,)),
    )
    policy = DecisionTransformerInferenceWrapper(actor, inference_context=3).eval()
    policy.set_tensor_keys(
        observation="observation_cat", action="action_cat", return_to_go="return_to_go_cat"
    )
    with torch.no_grad():
        td = env.rollout(8, policy, break_when_any_done=False)
        again = env.rollout(8, policy, break_when_any_done=False)
    assert td["action"].shape == (2, 8, 1)
    assert ((td["action"] >= 0) & (td["action"] <= 1)).all()
    torch.testing.assert_close(td["action"], again["action"])  # eval mode: deterministic
    # The target return drops by each reward and restarts after the reset at step 6.
    expected = torch.tensor([10.0, 9, 8, 7, 6, 5, 10, 9])
    assert torch.equal(td["return_to_go_single"][0, :, 0], expected)
    # The policy saw the window of the last 4 observations (unmasked in the output) and the
    # return-to-go of the current step as the last entry of its window.
    assert torch.equal(td["observation_cat"][0, 4, :, 0], torch.tensor([1.0, 2, 3, 4]))
    assert torch.equal(td["return_to_go_cat"][0, :, 0], expected)
    # The actions it took are the ones the env windows carry afterwards.
    torch.testing.assert_close(td["next", "action_cat"][0, 1, -1], td["action"][0, 1])
