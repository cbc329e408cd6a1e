"""DTypeCastTransform, DoubleToFloat and DeviceCastTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    DeviceCastTransform,
    DoubleToFloat,
    DTypeCastTransform,
    PendulumV1Env,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tdrl.testing import TransformContract, TransformTestEnv

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class TestDoubleToFloatContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return DoubleToFloat()


class TestDTypeCastContract(TransformContract):
    def make_transform(self, layout):
        key = ("agents", "observation") if layout == "nested" else "observation"
        return DTypeCastTransform(torch.float32, torch.float64, in_keys=key, in_keys_inv=[])


class TestDeviceCastContract(TransformContract):
    def make_transform(self, layout):
        return DeviceCastTransform("cpu")


def test_double_to_float_finds_every_float64_entry():
    env = TransformedEnv(TransformTestEnv((2,)), DoubleToFloat())
    t = env.transform
    assert t.in_keys == ["obs64"] and t.in_keys_inv == ["force"]
    assert env.full_action_spec["force"].dtype == torch.float32
    assert env.full_action_spec["force"].high.dtype == torch.float32
    td = env.rand_action(env.reset())
    assert td["force"].dtype == torch.float32
    out = env.step(td)
    assert out["force"].dtype == torch.float32  # the caller's action is not touched
    torch.testing.assert_close(
        out["next", "obs64"], torch.tensor([[1.0, 1.0], [1.0, 1.0]]) + td["force"]
    )


def test_explicit_keys_and_forward_outside_an_env():
    t = DTypeCastTransform(torch.float32, torch.float16, in_keys="a")
    td = t(TensorDict(a=torch.ones(2), b=torch.ones(2), next=TensorDict(a=torch.ones(2))))
    assert td["a"].dtype == torch.float16 and td["b"].dtype == torch.float32
    assert td["next", "a"].dtype == torch.float32  # keys as given: "a" is the root entry only
    t = DTypeCastTransform(torch.float32, torch.float16, in_keys=["a", ("next", "a")])
    td = t(TensorDict(a=torch.ones(2), next=TensorDict(a=torch.ones(2))))
    assert td["a"].dtype == td["next", "a"].dtype == torch.float16
    auto = DoubleToFloat()
    td = auto(
        TensorDict(
            a=torch.ones(2, dtype=torch.float64),
            next=TensorDict(r=torch.ones(1, dtype=torch.float64)),
        )
    )
    assert td["a"].dtype == td["next", "r"].dtype == torch.float32


def test_float64_builtin_env_is_checked():
    class Pendulum64(PendulumV1Env):
        def _step(self, td):
            return super()._step(td)

    env = TransformedEnv(
        PendulumV1Env(batch_size=(3,)), DTypeCastTransform(torch.float32, torch.float64)
    )
    check_env_specs(env)
    assert env.rand_step()["next", "observation"].dtype == torch.float64
    assert env.full_action_spec["action"].dtype == torch.float64


def test_device_cast_env_device_follows():
    env = TransformedEnv(TransformTestEnv((2,)), DeviceCastTransform("cpu"))
    assert env.device == torch.device("cpu")
    env.append_transform(StepCounter(3))
    check_env_specs(env)


@cuda
def test_device_cast_to_cuda_and_back():
    env = TransformedEnv(TransformTestEnv((2, 3), max_steps=2), DeviceCastTransform("cuda"))
    env.append_transform(StepCounter(3))
    assert env.device.type == "cuda"
    assert env.full_observation_spec["observation"].device.type == "cuda"
    td = env.rollout(6, break_when_any_done=False)
    assert td.device.type == "cuda" and td["next", "step_count"].device.type == "cuda"
    assert td["action"].device.type == "cuda"
    check_env_specs(env)
    nested = TransformedEnv(TransformTestEnv((2,), nested=True), DeviceCastTransform("cuda:0"))
    check_env_specs(nested)


def test_out_keys_come_second_as_in_torchrl():
    td = TensorDict(a=torch.ones(2, dtype=torch.float64))
    out = DoubleToFloat(["a"], ["b"])(td)
    assert out["b"].dtype == torch.float32 and out["a"].dtype == torch.float64
    out = DTypeCastTransform(torch.float64, torch.float16, ["a"], ["c"])(out)
    assert out["c"].dtype == torch.float16
    with pytest.raises(ValueError, match=r"DoubleToFloat.__init__: out_keys needs in_keys"):
        DoubleToFloat(out_keys=["b"])
