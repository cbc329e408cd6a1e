"""The nn.Module methods TorchRL scripts call on envs: apply, eval/train, state dicts, specs."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.transforms import (
    Compose,
    ObservationNorm,
    RewardSum,
    StepCounter,
    Transform,
    TransformedEnv,
)
from tdrl.specs import Composite
from tdrl.testing import CountingEnv, NestedCountingEnv


class Recorder(Transform):
    """A TorchRL-style recorder: scripts call ``env.apply(dump_video)`` to reach ``dump``."""

    def __init__(self):
        super().__init__()
        self.frames: list[torch.Tensor] = []
        self.dumped: list[int] = []

    def _call(self, tensordict):
        self.frames.append(tensordict["observation"].clone())
        return tensordict

    def dump(self):
        self.dumped.append(len(self.frames))
        self.frames = []


def test_apply_reaches_the_base_env_every_transform_and_the_env_in_module_order():
    rec = Recorder()
    env = TransformedEnv(CountingEnv(), Compose(StepCounter(), rec))
    seen = []
    assert env.apply(seen.append) is env
    # nn.Module.apply: children first (base env, then the transform tree), the env last
    assert [type(m).__name__ for m in seen] == [
        "CountingEnv",
        "StepCounter",
        "Recorder",
        "ModuleList",
        "Compose",
        "TransformedEnv",
    ]
    assert seen[0] is env.base_env and seen[-1] is env


def test_apply_dump_video_as_torchrl_scripts_write_it():
    rec = Recorder()
    env = TransformedEnv(TransformedEnv(CountingEnv(), StepCounter()), rec)
    env.rollout(3)

    def dump_video(module):
        if isinstance(module, Recorder):
            module.dump()

    env.apply(dump_video)
    assert rec.dumped == [3]  # the three steps (the default _reset does not call _call)


def test_plain_env_module_methods():
    env = CountingEnv()
    assert env.training and list(env.children()) == [] and list(env.modules()) == [env]
    assert env.eval() is env and not env.training
    assert env.train() is env and env.training
    seen = []
    assert env.apply(seen.append) is env and seen == [env]
    assert dict(env.state_dict()) == {}
    assert not env.load_state_dict({}).unexpected_keys
    with pytest.raises(RuntimeError, match=r"CountingEnv.load_state_dict: unexpected keys"):
        env.load_state_dict({"loc": torch.zeros(1)})
    assert env.load_state_dict({"loc": torch.zeros(1)}, strict=False).unexpected_keys == ["loc"]
    with pytest.raises(ValueError, match="mode must be a bool"):
        env.train("yes")


def test_transformed_env_train_and_eval_switch_the_transforms_only():
    # TorchRL: transforms attached to an env are in eval mode; env.train()/eval() switch them
    t = StepCounter()
    assert t.training
    env = TransformedEnv(CountingEnv(), t)
    assert not t.training
    appended = RewardSum()
    env.append_transform(appended)
    assert not appended.training
    assert env.train() is env and t.training and appended.training
    assert env.training and env.base_env.training
    assert env.eval() is env and not t.training and not appended.training
    assert env.training and env.base_env.training  # TorchRL leaves both as they were


def test_state_dict_keys_follow_torchrl():
    single = TransformedEnv(CountingEnv(), ObservationNorm(1.0, 2.0, out_keys="n"))
    assert list(single.state_dict()) == ["standard_normal", "loc", "scale"]
    composed = TransformedEnv(CountingEnv(), Compose(ObservationNorm(1.0, 2.0, out_keys="n")))
    assert list(composed.state_dict()) == [
        "transforms.0.standard_normal",
        "transforms.0.loc",
        "transforms.0.scale",
    ]
    # appending to a single transform makes a Compose: the keys get their prefix
    single.append_transform(StepCounter())
    assert next(iter(single.state_dict())) == "transforms.0.standard_normal"


def test_env_specs_holds_output_and_input_specs():
    env = NestedCountingEnv(batch_size=(2,))
    specs = env.specs
    assert isinstance(specs, Composite) and specs.shape == (2,)
    assert set(specs.keys()) == {"output_spec", "input_spec"}
    out, inp = specs["output_spec"], specs["input_spec"]
    assert set(out.keys()) == {"full_observation_spec", "full_reward_spec", "full_done_spec"}
    assert set(inp.keys()) == {"full_action_spec", "full_state_spec"}
    assert out["full_done_spec"] == env.full_done_spec
    assert inp["full_action_spec"] == env.full_action_spec
    assert out["full_observation_spec"] == env.full_observation_spec
    transformed = TransformedEnv(env, StepCounter())
    assert "step_count" in transformed.specs["output_spec", "full_observation_spec"].keys()
