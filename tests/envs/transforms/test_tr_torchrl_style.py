"""Custom transforms written the way TorchRL's tutorials and docs write them, run on tdrl envs.

Each transform below is TorchRL code with only the imports changed; the expected values are
worked out by hand (and were checked against torchrl 0.14.1 on the same env).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import EnvBase, StepCounter, TransformedEnv
from tdrl.envs.transforms import Compose, Transform
from tdrl.envs.transforms.transforms import _apply_to_composite, _apply_to_composite_inv
from tdrl.envs.utils import check_env_specs
from tdrl.specs import Bounded, Composite, Unbounded


class Drift(EnvBase):
    """obs starts at [0, 1] and moves by the action; reward = -|obs|_1."""

    def __init__(self, batch_size=()):
        super().__init__(batch_size=batch_size)
        self.observation_spec = Composite(
            observation=Unbounded(shape=(*batch_size, 2)), shape=batch_size
        )
        self.action_spec = Bounded(-1.0, 1.0, shape=(*batch_size, 2))
        self.reward_spec = Unbounded(shape=(*batch_size, 1))

    def _reset(self, td):
        obs = torch.arange(2.0).expand(*self.batch_size, 2).clone()
        return TensorDict(observation=obs, batch_size=self.batch_size)

    def _step(self, td):
        obs = td["observation"] + td["action"]
        reward = -obs.abs().sum(-1, keepdim=True)
        return TensorDict(observation=obs, reward=reward, batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


class SinTransform(Transform):  # TorchRL's pendulum tutorial
    def _apply_transform(self, obs: torch.Tensor) -> None:
        return obs.sin()

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase):
        return self._call(tensordict_reset)

    @_apply_to_composite
    def transform_observation_spec(self, observation_spec):
        return Bounded(
            low=-1,
            high=1,
            shape=observation_spec.shape,
            dtype=observation_spec.dtype,
            device=observation_spec.device,
        )


class AddNorm(Transform):  # the whole observation Composite in and out
    def __init__(self):
        super().__init__(in_keys=["observation"], out_keys=["obs_norm"])

    def _call(self, next_tensordict):
        next_tensordict["obs_norm"] = next_tensordict["observation"].norm(dim=-1, keepdim=True)
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        observation_spec["obs_norm"] = Unbounded(shape=(*observation_spec.shape, 1))
        return observation_spec


class ScaleReward(Transform):
    def __init__(self, scale):
        super().__init__(in_keys=["reward"], out_keys=["reward"])
        self.scale = scale

    def _apply_transform(self, reward):
        return reward * self.scale

    @_apply_to_composite
    def transform_reward_spec(self, reward_spec):
        return reward_spec


class HalfAction(Transform):  # the action side: the env reads half of what the user writes
    def __init__(self):
        super().__init__(in_keys_inv=["action"], out_keys_inv=["action"])

    def _inv_apply_transform(self, action):
        return action * 0.5

    @_apply_to_composite_inv
    def transform_input_spec(self, action_spec):
        return Bounded(-2.0, 2.0, shape=action_spec.shape, dtype=action_spec.dtype)


class PrevAction(Transform):  # TorchRL's docs: in_keys=[] with out_keys, reads the root
    def __init__(self):
        super().__init__(in_keys=[], out_keys=["prev_action"])

    def _step(self, tensordict, next_tensordict):
        next_tensordict["prev_action"] = tensordict["action"].clone()
        return next_tensordict

    def _reset(self, tensordict, tensordict_reset):
        tensordict_reset["prev_action"] = torch.zeros(*tensordict_reset.batch_size, 2)
        return tensordict_reset

    def transform_observation_spec(self, observation_spec):
        observation_spec["prev_action"] = Unbounded(shape=(*observation_spec.shape, 2))
        return observation_spec


class CostEntry(Transform):  # transform_output_spec: a second reward entry
    def _call(self, next_tensordict):
        next_tensordict["cost"] = -next_tensordict["reward"]
        return next_tensordict

    def transform_output_spec(self, output_spec):
        output_spec["full_reward_spec", "cost"] = output_spec["full_reward_spec", "reward"].clone()
        return output_spec


class ClipAction(Transform):  # _inv_call on the whole tensordict
    def _inv_call(self, tensordict):
        return tensordict.set("action", tensordict["action"].clamp(-0.5, 0.5))


class EpisodeCount(Transform):  # stateful _reset, a buffer in the state dict
    def __init__(self):
        super().__init__(in_keys=[], out_keys=["episodes"])
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def _reset(self, tensordict, tensordict_reset):
        self.count += 1
        tensordict_reset["episodes"] = self.count.expand(*tensordict_reset.batch_size, 1).clone()
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        next_tensordict["episodes"] = tensordict["episodes"].clone()
        return next_tensordict

    def transform_observation_spec(self, observation_spec):
        observation_spec["episodes"] = Unbounded(
            shape=(*observation_spec.shape, 1), dtype=torch.int64
        )
        return observation_spec


def _policy(td):
    return td.set("action", torch.full((*td.batch_size, 2), 0.7))


def _env(batch):
    return TransformedEnv(
        Drift(batch),
        Compose(
            SinTransform(in_keys=["observation"], out_keys=["sin"]),
            AddNorm(),
            ScaleReward(0.5),
            HalfAction(),
            PrevAction(),
            CostEntry(),
            ClipAction(),
            EpisodeCount(),
            StepCounter(10),
        ),
    )


@pytest.mark.parametrize("batch", [(), (3,)])
def test_torchrl_style_transforms_run_on_a_tdrl_env(batch):
    env = _env(batch)
    check_env_specs(env)
    td = env.rollout(3, _policy)
    # the user writes 0.7, ClipAction makes it 0.5, HalfAction 0.25: the env moves by 0.25
    obs = torch.tensor([[0.25, 1.25], [0.5, 1.5], [0.75, 1.75]]).expand(*batch, 3, 2)
    torch.testing.assert_close(td["next", "observation"], obs)
    torch.testing.assert_close(td["next", "sin"], obs.sin())
    torch.testing.assert_close(td["next", "obs_norm"], obs.norm(dim=-1, keepdim=True))
    torch.testing.assert_close(td["next", "reward"], -0.5 * obs.sum(-1, keepdim=True))
    torch.testing.assert_close(td["next", "cost"], 0.5 * obs.sum(-1, keepdim=True))
    # TorchRL: _step sees the root as the inverse maps left it (the action the env reads)
    assert td["next", "prev_action"].eq(0.25).all() and td["action"].eq(0.7).all()
    assert td["episodes"].eq(2).all()  # check_env_specs reset once, the rollout once
    spec = env.full_observation_spec
    assert isinstance(spec["sin"], Bounded) and spec["sin"].high.eq(1).all()
    assert set(spec.keys()) >= {"obs_norm", "prev_action", "episodes", "step_count"}
    assert set(env.full_reward_spec.keys()) == {"reward", "cost"}
    assert env.full_action_spec["action"].high.eq(2.0).all()
    assert dict(env.state_dict()) == {"transforms.7.count": torch.tensor(2)}


def test_forward_and_inv_on_buffer_data():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(
        SinTransform(
            in_keys=["observation", ("next", "observation")], out_keys=["sin", ("next", "sin")]
        )
    )
    rb.extend(TransformedEnv(Drift(), StepCounter()).rollout(5, _policy))
    sample = rb.sample(4)
    torch.testing.assert_close(sample["sin"], sample["observation"].sin())
    torch.testing.assert_close(sample["next", "sin"], sample["next", "observation"].sin())
    out = ScaleReward(2.0)(TensorDict(reward=torch.ones(2, 1), batch_size=[2]))
    assert out["reward"].flatten().tolist() == [2.0, 2.0]
    assert HalfAction().inv(TensorDict(action=torch.ones(2)))["action"].tolist() == [0.5, 0.5]


def test_unpaired_keys_raise_where_the_default_hooks_pair_them():
    class Pairs(Transform):
        def _apply_transform(self, x):
            return x

    with pytest.raises(ValueError, match=r"Pairs._call: in_keys/out_keys differ in length"):
        TransformedEnv(Drift(), Pairs(in_keys=["observation"], out_keys=["a", "b"]))
    with pytest.raises(ValueError, match=r"Pairs.forward: in_keys/out_keys differ in length"):
        Pairs(in_keys=["x"], out_keys=["a", "b"])(TensorDict(x=torch.ones(1)))
    with pytest.raises(ValueError, match=r"Pairs.inv: in_keys_inv/out_keys_inv differ"):
        Pairs(in_keys_inv=["x"], out_keys_inv=["a", "b"]).inv(TensorDict(a=torch.ones(1)))
