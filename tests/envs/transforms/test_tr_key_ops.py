"""CatTensors, RenameKeys, ExcludeKeys and SelectKeys."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    CatTensors,
    Compose,
    DoubleToFloat,
    ExcludeKeys,
    RenameKeys,
    RewardSum,
    SelectKeys,
    TransformedEnv,
    check_env_specs,
)
from tdrl.specs import Bounded
from tdrl.testing import CountingEnv, TransformContract, TransformTestEnv


class TestCatTensorsContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return Compose(DoubleToFloat(), CatTensors(["observation", "obs64"], "features"))


class TestRenameKeysContract(TransformContract):
    def make_transform(self, layout):
        if layout == "nested":
            return RenameKeys([("agents", "observation")], [("agents", "obs")])
        return RenameKeys(["observation", "reward"], ["obs", "r"])


class TestExcludeKeysContract(TransformContract):
    def make_transform(self, layout):
        return ExcludeKeys(("agents", "action_mask") if layout == "nested" else "pixels")


class TestSelectKeysContract(TransformContract):
    def make_transform(self, layout):
        if layout == "nested":
            return SelectKeys("observation", ("agents", "action_mask"))
        return SelectKeys("observation")


def test_cat_tensors_values_and_bounds():
    env = TransformedEnv(
        TransformTestEnv((2,)),
        Compose(DoubleToFloat(), CatTensors(["observation", "obs64"], "f", del_keys=False)),
    )
    td = env.rollout(3)
    torch.testing.assert_close(
        td["next", "f"], torch.cat([td["next", "observation"], td["next", "obs64"]], -1)
    )
    assert "obs64" in td.keys()
    bounded = TransformedEnv(
        TransformTestEnv(), CatTensors(["pixels", "pixels"], "twice", dim=-3, del_keys=False)
    )
    spec = bounded.full_observation_spec["twice"]
    assert isinstance(spec, Bounded) and spec.shape == (12, 8, 3)
    assert bounded.reset()["twice"].shape == (12, 8, 3)


def test_cat_tensors_errors():
    with pytest.raises(ValueError, match="negative dim"):
        CatTensors(["a"], "b", dim=0)
    with pytest.raises(TypeError, match=r"CatTensors.*different dtypes.*DTypeCast"):
        TransformedEnv(TransformTestEnv(), CatTensors(["observation", "obs64"]))
    with pytest.raises(KeyError, match=r"CatTensors.in_keys: key 'nope'"):
        TransformedEnv(TransformTestEnv(), CatTensors(["observation", "nope"]))


def test_rename_forward_and_inverse():
    env = TransformedEnv(
        TransformTestEnv((2,)),
        RenameKeys(["observation"], ["obs"], in_keys_inv=["action"], out_keys_inv=["act"]),
    )
    assert "obs" in env.observation_keys and "observation" not in env.observation_keys
    assert "act" in env.action_keys and "action" not in env.action_keys
    td = env.rand_step()
    assert "act" in td.keys() and "action" not in td.keys()
    assert td["next", "obs"].shape == (2, 3)
    check_env_specs(env)


def test_rename_with_copy_keeps_the_original_and_works_with_stateful_envs():
    env = TransformedEnv(
        CountingEnv(max_steps=3), RenameKeys(["observation"], ["o"], create_copy=True)
    )
    td = env.rollout(3)
    assert (
        td["next", "o"].flatten().tolist()
        == td["next", "observation"].flatten().tolist()
        == [1.0, 2.0, 3.0]
    )


def test_rename_reward_then_sum_the_new_key():
    env = TransformedEnv(TransformTestEnv(), Compose(RenameKeys(["reward"], ["r"]), RewardSum()))
    assert env.reward_keys == ["r"] and "episode_r" in env.observation_keys
    check_env_specs(env)


def test_rename_refuses_done_leaves_and_reports_missing_data():
    with pytest.raises(ValueError, match=r"RenameKeys.*'done' is a done leaf"):
        TransformedEnv(TransformTestEnv(), RenameKeys(["done"], ["finished"]))
    t = RenameKeys(["a"], ["b"])
    assert t(TensorDict(a=torch.ones(1), next=TensorDict(a=torch.ones(1))))["next", "b"].item() == 1
    with pytest.raises(KeyError, match=r"RenameKeys.forward: key 'a'"):
        t(TensorDict(c=torch.ones(1)))


def test_exclude_and_select_specs_and_data():
    env = TransformedEnv(TransformTestEnv((2,)), ExcludeKeys("pixels", "obs64"))
    assert set(env.observation_keys) == {"observation", "action_mask"}
    assert set(env.rollout(2)["next"].keys()) == {
        "observation",
        "action_mask",
        "reward",
        "done",
        "terminated",
        "truncated",
    }
    env = TransformedEnv(TransformTestEnv((2,)), SelectKeys("pixels"))
    assert env.observation_keys == ["pixels"]
    check_env_specs(env)
    td = TensorDict(
        observation=torch.ones(1), pixels=torch.ones(1), next=TensorDict(observation=torch.ones(1))
    )
    out = env.transform[0](td)
    assert set(out.keys()) == {"pixels", "next"} and set(out["next"].keys()) == set()


def test_exclude_select_refuse_protected_keys():
    with pytest.raises(
        ValueError, match=r"ExcludeKeys: 'reward' is a done, reward, action or state"
    ):
        TransformedEnv(TransformTestEnv(), ExcludeKeys("reward"))
    with pytest.raises(KeyError, match=r"ExcludeKeys.in_keys: key 'nope'"):
        TransformedEnv(TransformTestEnv(), ExcludeKeys("nope"))
    with pytest.raises(RuntimeError, match=r"SelectKeys._drop: the observation keys are unknown"):
        SelectKeys("a")(TensorDict(a=torch.ones(1)))
