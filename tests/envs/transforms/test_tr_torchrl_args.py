"""TorchRL's arguments of the transforms: positions, defaults, what they do, and refusals."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    CatFrames,
    DeviceCastTransform,
    FlattenObservation,
    GrayScale,
    RewardSum,
    StepCounter,
    TensorDictPrimer,
    ToTensorImage,
    Transform,
    TransformedEnv,
)
from tdrl.errors import SpecError
from tdrl.specs import Bounded, Unbounded
from tdrl.testing import CountingEnv, NestedCountingEnv, TransformTestEnv


def test_device_cast_orig_device_and_per_key_refusal():
    t = DeviceCastTransform("cpu", "cpu")
    assert t.orig_device == torch.device("cpu")
    env = TransformedEnv(CountingEnv(), t)
    assert env.rollout(2)["next", "observation"].device == torch.device("cpu")
    with pytest.raises(NotImplementedError, match=r"in_keys=\['observation'\]"):
        DeviceCastTransform("cpu", in_keys=["observation"])


def test_reward_sum_reset_keys_choose_the_group_that_restarts_the_sum():
    def run(reset_keys):
        env = TransformedEnv(
            NestedCountingEnv(batch_size=(2,), max_steps=50),
            RewardSum(["reward"], None, reset_keys),
        )
        td = env.step_mdp(env.rand_step(env.step_mdp(env.rand_step(env.reset()))))
        before = td["episode_reward"].clone()
        assert before.gt(0).all()
        td["nested_2", "_reset"] = torch.tensor([[True], [False]])
        return before, env.reset(td)["episode_reward"]

    before, kept = run(None)  # default: the root group owns "reward"; it does not reset
    torch.testing.assert_close(kept, before)
    before, reset = run([("nested_2", "_reset")])
    torch.testing.assert_close(reset, torch.stack([torch.zeros(1), before[1]]))
    with pytest.raises(KeyError, match=r"RewardSum.reset_keys: 'nope' is not a _reset key"):
        TransformedEnv(NestedCountingEnv(), RewardSum(reset_keys="nope"))
    with pytest.raises(NotImplementedError, match=r"reward_spec=True"):
        RewardSum(reward_spec=True)


def test_step_counter_positional_order_is_torchrl():
    env = TransformedEnv(CountingEnv(max_steps=50), StepCounter(2, "cut", "n", False))
    td = env.rollout(5)
    assert td["next", "n"].flatten().tolist() == [1, 2, 3, 4, 5]  # update_done=False: runs on
    assert td["next", "cut"].flatten().tolist() == [False, True, True, True, True]
    assert not td["next", "done"].any()


def test_primer_random_default_none_and_torchrl_callables():
    spec = Bounded(-2.0, -1.0, shape=(2, 64))
    torch.manual_seed(0)
    env = TransformedEnv(CountingEnv(batch_size=(2,)), TensorDictPrimer({"h": spec}, True))
    h = env.reset()["h"]
    assert h.ge(-2).all() and h.le(-1).all() and h.std() > 0
    zeros = TransformedEnv(
        CountingEnv(batch_size=(2,)), TensorDictPrimer(h=Unbounded(shape=(3,)), expand_specs=True)
    )
    assert zeros.reset()["h"].eq(0).all()  # default_value=None: 0.0
    made = TensorDictPrimer({"h": Unbounded(shape=(2, 3))}, None, lambda: torch.full((2, 3), 4.0))
    env = TransformedEnv(CountingEnv(batch_size=(2,)), made)
    assert env.reset()["h"].eq(4.0).all()  # TorchRL calls default_value() without arguments
    with pytest.raises(ValueError, match="random and default_value exclude each other"):
        TensorDictPrimer(h=Unbounded(shape=(3,)), random=True, default_value=1.0)
    with pytest.raises(ValueError, match="default_value misses primers"):
        TensorDictPrimer(a=Unbounded(shape=(1,)), b=Unbounded(shape=(1,)), default_value={"a": 1.0})


@pytest.mark.parametrize("arg", ["single_default_value", "call_before_env_reset"])
def test_primer_refuses_what_it_cannot_honour(arg):
    with pytest.raises(NotImplementedError, match=rf"{arg} is not supported"):
        TensorDictPrimer(h=Unbounded(shape=(3,)), **{arg: True})


def test_to_tensor_image_from_int_unsqueeze_dtype_and_shape_tolerant():
    px = torch.arange(24, dtype=torch.uint8).reshape(2, 4, 3)  # [H, W, C], unbatched
    td = TensorDict(pixels=px)
    out = ToTensorImage(False)(td.clone())["pixels"]
    torch.testing.assert_close(out, px.permute(2, 0, 1).float())  # from_int=False: no scaling
    out = ToTensorImage(None, True, torch.float64)(td.clone())["pixels"]
    assert out.shape == (1, 3, 2, 4) and out.dtype == torch.float64
    torch.testing.assert_close(out[0], px.permute(2, 0, 1).double() / 255)
    floats = TensorDict(pixels=torch.full((2, 4, 3), 51.0))
    assert ToTensorImage(True)(floats)["pixels"].eq(0.2).all()  # from_int=True scales floats
    chw = TensorDict(img=torch.zeros(1, 5, 6, dtype=torch.uint8))
    out = ToTensorImage(in_keys="img", shape_tolerant=True)(chw)["img"]
    assert out.shape == (1, 5, 6)  # last dim is not 3: left as it is
    env = TransformedEnv(TransformTestEnv(), ToTensorImage(unsqueeze=True))
    assert env.full_observation_spec["pixels"].shape == (1, 3, 6, 8)
    assert env.reset()["pixels"].shape == (1, 3, 6, 8)


def test_cat_frames_padding_positional_reset_key_and_done_key():
    env = TransformedEnv(
        CountingEnv(max_steps=9), CatFrames(3, -1, "observation", "s", "constant", -1.0)
    )
    assert env.rollout(2)["next", "s"].tolist() == [[-1.0, 0.0, 1.0], [0.0, 1.0, 2.0]]
    td = TensorDict(
        obs=torch.arange(4.0).reshape(4, 1),
        next=TensorDict(
            done=torch.tensor([[False], [True], [False], [False]]),
            cut=torch.tensor([[True], [False], [False], [False]]),
        ),
        batch_size=[4],
    )
    out = CatFrames(2, -1, "obs", "s", done_key="cut")(td.clone())
    assert out["s"].tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 2.0], [2.0, 3.0]]
    with pytest.raises(KeyError, match=r"\('next', 'nope'\)"):
        CatFrames(2, -1, "obs", done_key="nope")(td.clone())
    nested = TransformedEnv(
        NestedCountingEnv(batch_size=(2,), max_steps=50),
        CatFrames(2, -1, "observation", "s", reset_key=("nested_2", "_reset")),
    )
    td = nested.step_mdp(nested.rand_step(nested.reset()))
    before = td["s"].clone()
    td["nested_2", "_reset"] = torch.tensor([[True], [False]])
    out = nested.reset(td)
    frame = out["observation"][0]
    torch.testing.assert_close(out["s"][0], torch.cat([frame, frame], -1))
    torch.testing.assert_close(out["s"][1], before[1])
    with pytest.raises(KeyError, match="reset_key 'nope' is not a reset key"):
        TransformedEnv(CountingEnv(), CatFrames(2, -1, "observation", reset_key="nope"))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"as_inverse": True}, "as_inverse"),
        ({"future": True}, "future"),
        ({"mask_key": "m"}, "mask_key"),
    ],
)
def test_cat_frames_refuses_what_it_cannot_honour(kwargs, name):
    with pytest.raises(NotImplementedError, match=rf"CatFrames.__init__: {name} is not supported"):
        CatFrames(2, -1, **kwargs)


def test_image_key_defaults_are_pixels_as_torchrl():
    assert FlattenObservation(-2, -1).in_keys == ["pixels"]
    assert GrayScale().in_keys == ["pixels"] and ToTensorImage().in_keys == ["pixels"]
    assert CatFrames(2, -1).in_keys == ["pixels"]
    env = TransformedEnv(TransformTestEnv((2,)), FlattenObservation(-3, -1))
    assert env.reset()["pixels"].shape == (2, 144)
    with pytest.raises(ValueError, match="allow_positive_dim=True"):
        FlattenObservation(-2, -1, allow_positive_dim=True)


def test_transformed_env_takes_torchrl_s_env_base_options():
    base = CountingEnv(batch_size=(2,))
    env = TransformedEnv(
        base, StepCounter(), batch_size=(2,), run_type_checks=True, spec_locked=False
    )
    assert env.batch_size == (2,) and env.run_type_checks and not env.spec_locked
    assert env.rollout(3)["next", "step_count"].shape == (2, 3, 1)
    with pytest.raises(ValueError, match=r"batch_size differs from the base env's \(got \(3,\)"):
        TransformedEnv(CountingEnv(batch_size=(2,)), batch_size=(3,))
    with pytest.raises(ValueError, match="auto_reset=True is not supported"):
        TransformedEnv(CountingEnv(), auto_reset=True)


class _DoubleLater(Transform):
    """Turns the reward to float64 from its third call on (the reset, then a first step), outside its spec."""

    def __init__(self) -> None:
        super().__init__(in_keys=["reward"])
        self.calls = 0

    def _apply_transform(self, reward: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return reward.double() if self.calls > 2 else reward


def test_transformed_env_run_type_checks_checks_every_output():
    # the one-time check of the first outputs passes; only run_type_checks sees the later ones
    checked = TransformedEnv(CountingEnv(max_steps=100), _DoubleLater(), run_type_checks=True)
    td = checked.reset()
    td["action"] = torch.ones(1)
    td = checked.step_mdp(checked.step(td))
    td["action"] = torch.ones(1)
    with pytest.raises(SpecError, match="reward"):
        checked.step(td)
    quiet = TransformedEnv(CountingEnv(max_steps=100), _DoubleLater())
    assert quiet.rollout(3)["next", "reward"].dtype == torch.float64
