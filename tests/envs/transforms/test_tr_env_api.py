"""TorchRL's env-level API around transforms: set_seed, append_transform, to, spec group hooks."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDictBase

from tdrl.envs.batched import SerialEnv
from tdrl.envs.core import EnvBase
from tdrl.envs.transforms import (
    Compose,
    InitTracker,
    RewardSum,
    StepCounter,
    Transform,
    TransformedEnv,
)
from tdrl.specs import Composite, Unbounded
from tdrl.testing import CountingEnv


def test_set_seed_static_seed_reaches_a_batched_base_env():
    env = TransformedEnv(SerialEnv(3, CountingEnv), StepCounter())
    assert env.set_seed(11, static_seed=True) == 11
    assert [e.seed for e in env.base_env.envs] == [11, 11, 11]


def test_set_seed_returns_what_the_base_env_returns():
    env = TransformedEnv(SerialEnv(2, CountingEnv))
    reference = SerialEnv(2, CountingEnv)
    assert env.set_seed(5) == reference.set_seed(5)
    assert [e.seed for e in env.base_env.envs] == [e.seed for e in reference.envs]
    assert len({e.seed for e in env.base_env.envs}) == 2


def test_append_and_insert_transform_return_the_env():
    env = TransformedEnv(CountingEnv())
    assert env.append_transform(StepCounter()) is env
    assert env.insert_transform(0, InitTracker()) is env
    assert [type(t).__name__ for t in env.transform] == ["InitTracker", "StepCounter"]


def test_env_append_transform_returns_a_new_transformed_env():
    base = CountingEnv()
    env = base.append_transform(StepCounter(max_steps=2))
    assert isinstance(env, TransformedEnv) and env.base_env is base
    assert "step_count" not in base.observation_keys
    assert env.rollout(5)["next", "step_count"].flatten().tolist() == [1, 2]
    chained = env.append_transform(InitTracker())
    assert chained is env and "is_init" in env.observation_keys


def test_env_append_transform_refuses_a_plain_callable():
    with pytest.raises(TypeError, match=r"CountingEnv.append_transform: expected a tdrl Transform"):
        CountingEnv().append_transform(lambda td: td)


class _AddsViaOutputSpec(Transform):
    """Declares and writes "bonus" through the group hooks only (TorchRL style)."""

    def transform_output_spec(self, output_spec: Composite) -> Composite:
        output_spec = output_spec.clone()
        output_spec["full_observation_spec", "bonus"] = Unbounded(shape=(1,))
        return output_spec

    def transform_input_spec(self, input_spec: Composite) -> Composite:
        input_spec = input_spec.clone()
        input_spec["full_state_spec", "memo"] = Unbounded(shape=(1,))
        return input_spec

    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.set("bonus", torch.ones(1))

    def _reset(
        self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        tensordict_reset.set("memo", torch.zeros(1))
        return self._call(tensordict_reset)


def test_overridden_group_spec_hooks_build_the_env_specs():
    env = TransformedEnv(CountingEnv(), _AddsViaOutputSpec())
    assert "bonus" in env.observation_keys and "memo" in env.state_keys
    assert env.rollout(2)["next", "bonus"].flatten().tolist() == [1.0, 1.0]


def test_group_spec_hooks_apply_the_kind_hooks_to_a_copy():
    out = Composite(
        full_observation_spec=Composite(observation=Unbounded(shape=(2,))),
        full_reward_spec=Composite(reward=Unbounded(shape=(1,))),
        full_done_spec=Composite(),
    )
    got = Transform(in_keys=["observation", "reward"], out_keys=["o2", "r2"]).transform_output_spec(
        out
    )
    assert sorted(got["full_observation_spec"].keys()) == ["o2", "observation"]
    assert sorted(got["full_reward_spec"].keys()) == ["r2", "reward"]
    assert list(out["full_observation_spec"].keys()) == ["observation"]
    inp = Composite(full_action_spec=Composite(force=Unbounded(shape=(1,))))
    moved = Transform(in_keys_inv="force", out_keys_inv="push").transform_input_spec(inp)
    assert list(moved["full_action_spec"].keys()) == ["push"]
    assert list(inp["full_action_spec"].keys()) == ["force"]


class _Movable(EnvBase):
    """Unbounded specs only: they can move to the "meta" device (no accelerator needed)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_spec = Unbounded(shape=(1,))
        self.action_spec = Unbounded(shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))
        self.moved_to: list[torch.device] = []

    def _to(self, device: torch.device) -> None:
        self.moved_to.append(device)


def test_to_moves_the_specs_and_calls_the_hook():
    env = _Movable()
    assert env.to("cpu") is env and env.moved_to == []
    assert env.to("meta") is env
    assert env.moved_to == [torch.device("meta")] and env.device == torch.device("meta")
    assert env.full_observation_spec["observation"].device == torch.device("meta")
    assert env.full_done_spec["done"].device == torch.device("meta")


def test_to_refuses_an_env_that_cannot_move():
    env = CountingEnv()
    with pytest.raises(NotImplementedError, match=r"CountingEnv.to: this env cannot move.*meta"):
        env.to("meta")
    assert env.device is None and env.full_observation_spec.device is None


def test_transformed_env_to_moves_its_base_env():
    env = TransformedEnv(_Movable(), StepCounter())
    assert env.to("meta") is env
    assert env.base_env.moved_to == [torch.device("meta")]
    assert env.device == torch.device("meta")
    assert env.full_observation_spec["step_count"].device == torch.device("meta")


def test_env_base_to_is_inherited():
    assert EnvBase.to is CountingEnv.to


def test_the_transform_given_is_env_transform():
    # TorchRL: TransformedEnv(env, t).transform is t; a Compose stays the Compose given
    t = StepCounter(max_steps=2)
    env = TransformedEnv(CountingEnv(), t)
    assert env.transform is t and t.container is env and t.parent is env.base_env
    assert env.rollout(5)["next", "step_count"].flatten().tolist() == [1, 2]
    given = Compose(StepCounter())
    assert TransformedEnv(CountingEnv(), given).transform is given
    assert CountingEnv().append_transform(t2 := InitTracker()).transform is t2


def test_append_and_insert_on_a_single_transform_make_a_compose_holding_it():
    t = StepCounter()
    env = TransformedEnv(CountingEnv(), t)
    env.append_transform(RewardSum())
    assert isinstance(env.transform, Compose) and env.transform[0] is t
    assert t.container is env and t.parent is env.base_env
    assert env.transform[1].parent.observation_keys == ["observation", "step_count"]
    assert "episode_reward" in env.observation_keys
    u = StepCounter()
    other = TransformedEnv(CountingEnv(), u)
    other.insert_transform(0, InitTracker())
    assert [type(x).__name__ for x in other.transform] == ["InitTracker", "StepCounter"]
    assert other.transform[1] is u and u.container is other
    assert other.rollout(2)["next", "step_count"].flatten().tolist() == [1, 2]


def test_append_and_insert_refuse_what_is_not_a_transform():
    env = TransformedEnv(CountingEnv(), StepCounter())
    with pytest.raises(TypeError, match=r"TransformedEnv.append_transform: expected a Transform"):
        env.append_transform(lambda td: td)
    with pytest.raises(TypeError, match=r"TransformedEnv.insert_transform: expected a Transform"):
        env.insert_transform(0, lambda td: td)
    with pytest.raises(TypeError, match=r"TransformedEnv.__init__: transform must be a Transform"):
        TransformedEnv(CountingEnv(), lambda td: td)
    assert isinstance(env.transform, StepCounter)  # unchanged


def test_setting_env_transform_replaces_the_transforms():
    old = StepCounter()
    env = TransformedEnv(CountingEnv(), old)
    new = InitTracker()
    env.transform = new
    assert env.transform is new and new.container is env and not new.training
    assert old.container is None and "step_count" not in env.observation_keys
    assert "is_init" in env.observation_keys and "is_init" in env.reset().keys()
    with pytest.raises(TypeError, match=r"TransformedEnv.transform: expected a Transform"):
        env.transform = "StepCounter"
