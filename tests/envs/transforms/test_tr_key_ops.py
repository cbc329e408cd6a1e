"""CatTensors, RenameTransform, ExcludeTransform and SelectTransform."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import (
    CatTensors,
    Compose,
    DoubleToFloat,
    ExcludeTransform,
    RenameTransform,
    RewardSum,
    SelectTransform,
    TransformedEnv,
    check_env_specs,
)
from tdrl.specs import Bounded
from tdrl.testing import CountingEnv, TransformContract, TransformTestEnv


class TestCatTensorsContract(TransformContract):
    layouts = ("flat",)

    def make_transform(self, layout):
        return Compose(DoubleToFloat(), CatTensors(["observation", "obs64"], "features"))


class TestRenameTransformContract(TransformContract):
    forward_mode = "custom"

    def check_forward(self, transform, base_rollout, env_rollout):
        # keys as given: the root has no reward, so name the "next" entries explicitly
        nxt = [("next", *((k,) if isinstance(k, str) else k)) for k in transform.in_keys]
        new = [("next", *((k,) if isinstance(k, str) else k)) for k in transform.out_keys]
        root = [(a, b) for a, b in zip(transform.in_keys, transform.out_keys) if a != "reward"]
        explicit = RenameTransform([a for a, _ in root] + nxt, [b for _, b in root] + new)
        got = explicit(base_rollout.clone())
        for key in [b for _, b in root] + new:
            torch.testing.assert_close(got[key], env_rollout[key], msg=f"key {key}")
        assert not set(transform.in_keys) & set(got.keys(True, True))

    def make_transform(self, layout):
        if layout == "nested":
            return RenameTransform([("agents", "observation")], [("agents", "obs")])
        return RenameTransform(["observation", "reward"], ["obs", "r"])


class TestExcludeTransformContract(TransformContract):
    def make_transform(self, layout):
        return ExcludeTransform(("agents", "action_mask") if layout == "nested" else "pixels")


class TestSelectTransformContract(TransformContract):
    forward_mode = "custom"

    def check_forward(self, transform, base_rollout, env_rollout):
        # TorchRL: the root keeps the selected keys and the reward, done and state entries
        got = transform(base_rollout.clone())
        env = transform.parent
        kept = {*transform.selected_keys, *env.reward_keys, *env.done_keys, *env.state_keys}
        assert set(got.keys(True, True)) == kept & set(base_rollout.keys(True, True))
        for key in got.keys(True, True):
            torch.testing.assert_close(got[key], env_rollout[key], msg=f"key {key}")

    def make_transform(self, layout):
        if layout == "nested":
            return SelectTransform("observation", ("agents", "action_mask"))
        return SelectTransform("observation")


def test_cat_tensors_values_and_bounds():
    env = TransformedEnv(
        TransformTestEnv((2,)),
        Compose(DoubleToFloat(), CatTensors(["observation", "obs64"], "f", del_keys=False)),
    )
    td = env.rollout(3)
    torch.testing.assert_close(  # TorchRL sorts the keys by default: "obs64" < "observation"
        td["next", "f"], torch.cat([td["next", "obs64"], td["next", "observation"]], -1)
    )
    assert "obs64" in td.keys()
    given = CatTensors(["observation", "obs64"], "g", -1, del_keys=False, sort=False)
    out = Compose(DoubleToFloat(), given)(td["next"].clone())
    torch.testing.assert_close(
        out["g"], torch.cat([td["next", "observation"], td["next", "obs64"]], -1)
    )
    nested = CatTensors([("z", "a"), "b", ("a", "z")])
    assert nested.in_keys == [("a", "z"), "b", ("z", "a")]
    bounded = TransformedEnv(
        TransformTestEnv(), CatTensors(["pixels", "pixels"], "twice", dim=-3, del_keys=False)
    )
    spec = bounded.full_observation_spec["twice"]
    assert isinstance(spec, Bounded) and spec.shape == (12, 8, 3)
    assert bounded.reset()["twice"].shape == (12, 8, 3)


def test_cat_tensors_errors():
    with pytest.raises(ValueError, match="negative dim"):
        CatTensors(["a"], "b", dim=0)
    with pytest.raises(ValueError, match=r"CatTensors.__init__: tdrl needs explicit in_keys"):
        CatTensors()
    with pytest.raises(ValueError, match=r"unsqueeze_if_oor=False"):
        CatTensors(["a"], unsqueeze_if_oor=True)
    with pytest.raises(TypeError, match=r"CatTensors.*different dtypes.*DTypeCastTransform"):
        TransformedEnv(TransformTestEnv(), CatTensors(["observation", "obs64"]))
    with pytest.raises(KeyError, match=r"CatTensors.in_keys: key 'nope'"):
        TransformedEnv(TransformTestEnv(), CatTensors(["observation", "nope"]))


def test_rename_forward_and_inverse():
    env = TransformedEnv(
        TransformTestEnv((2,)),
        RenameTransform(["observation"], ["obs"], in_keys_inv=["action"], out_keys_inv=["act"]),
    )
    assert "obs" in env.observation_keys and "observation" not in env.observation_keys
    assert "act" in env.action_keys and "action" not in env.action_keys
    td = env.rand_step()
    assert "act" in td.keys() and "action" not in td.keys()
    assert td["next", "obs"].shape == (2, 3)
    check_env_specs(env)


def test_rename_with_copy_keeps_the_original_and_works_with_stateful_envs():
    env = TransformedEnv(
        CountingEnv(max_steps=3), RenameTransform(["observation"], ["o"], create_copy=True)
    )
    td = env.rollout(3)
    assert (
        td["next", "o"].flatten().tolist()
        == td["next", "observation"].flatten().tolist()
        == [1.0, 2.0, 3.0]
    )


def test_rename_reward_then_sum_the_new_key():
    env = TransformedEnv(
        TransformTestEnv(), Compose(RenameTransform(["reward"], ["r"]), RewardSum())
    )
    assert env.reward_keys == ["r"] and "episode_r" in env.observation_keys
    check_env_specs(env)


def test_rename_refuses_done_leaves_and_reports_missing_data():
    with pytest.raises(ValueError, match=r"RenameTransform.*'done' is a done leaf"):
        TransformedEnv(TransformTestEnv(), RenameTransform(["done"], ["finished"]))
    t = RenameTransform(["a"], ["b"])
    out = t(TensorDict(a=torch.ones(1), next=TensorDict(a=torch.ones(1))))
    assert set(out.keys(True, True)) == {"b", ("next", "a")}  # keys as given: the root only
    t = RenameTransform(["a", ("next", "a")], ["b", ("next", "b")], create_copy=True)
    out = t(TensorDict(a=torch.ones(1), next=TensorDict(a=torch.ones(1))))
    assert set(out.keys(True, True)) == {"a", "b", ("next", "a"), ("next", "b")}
    with pytest.raises(ValueError, match=r"RenameTransform.__init__: a key is both renamed"):
        RenameTransform(["a", "b"], ["b", "c"])
    with pytest.raises(KeyError, match=r"RenameTransform.forward: key 'a'"):
        t(TensorDict(c=torch.ones(1)))


def test_exclude_and_select_specs_and_data():
    env = TransformedEnv(TransformTestEnv((2,)), ExcludeTransform("pixels", "obs64"))
    assert set(env.observation_keys) == {"observation", "action_mask"}
    assert set(env.rollout(2)["next"].keys()) == {
        "observation",
        "action_mask",
        "reward",
        "done",
        "terminated",
        "truncated",
    }
    env = TransformedEnv(TransformTestEnv((2,)), SelectTransform("pixels"))
    assert env.observation_keys == ["pixels"]
    check_env_specs(env)
    td = TensorDict(
        observation=torch.ones(1), pixels=torch.ones(1), next=TensorDict(observation=torch.ones(1))
    )
    out = env.transform(td)  # TorchRL: the selected keys and the reward/done/state entries
    assert set(out.keys()) == {"pixels"}
    td = TensorDict(a=torch.ones(1), b=torch.ones(1), reward=torch.ones(1), done=torch.ones(1))
    assert set(SelectTransform("a")(td).keys()) == {"a", "reward", "done"}
    td = TensorDict(a=torch.ones(1), b=torch.ones(1), next=TensorDict(a=torch.ones(1)))
    out = ExcludeTransform("a", ("next", "a"), "absent")(td)
    assert set(out.keys(True, True)) == {"b"} and ExcludeTransform("a").excluded_keys == ["a"]


def test_exclude_drops_rewards_and_truncated_as_torchrl():
    env = TransformedEnv(TransformTestEnv((2,)), ExcludeTransform("truncated", "reward"))
    assert env.done_keys == ["done", "terminated"] and env.reward_keys == []
    td = env.rollout(3)
    assert "truncated" not in td["next"].keys() and "reward" not in td["next"].keys()
    assert "truncated" not in env.reset().keys()


@pytest.mark.parametrize("key", ["done", "terminated", "force"])
def test_exclude_select_refuse_protected_keys(key):
    with pytest.raises(
        ValueError, match=rf"ExcludeTransform: '{key}' is a done/terminated, action or state"
    ):
        TransformedEnv(TransformTestEnv(), ExcludeTransform(key))
    with pytest.raises(KeyError, match=r"ExcludeTransform.in_keys: key 'nope'"):
        TransformedEnv(TransformTestEnv(), ExcludeTransform("nope"))
    with pytest.raises(ValueError, match=r"ExcludeTransform.__init__: inverse=True"):
        ExcludeTransform("a", inverse=True)
    with pytest.raises(ValueError, match=r"SelectTransform.__init__: keep_dones=False"):
        SelectTransform("a", keep_dones=False)
    with pytest.raises(ValueError, match=r"SelectTransform.__init__: keep_rewards=False"):
        SelectTransform("a", keep_rewards=False)


def test_rename_needs_one_new_name_per_key():
    with pytest.raises(ValueError, match=r"RenameTransform.__init__: in_keys/out_keys differ"):
        RenameTransform(["observation", "obs64"], ["x"])
    with pytest.raises(ValueError, match=r"RenameTransform.__init__: in_keys_inv/out_keys_inv"):
        RenameTransform(["observation"], ["x"], in_keys_inv=["a", "b"], out_keys_inv=["c"])
