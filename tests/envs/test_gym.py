"""GymEnv / GymWrapper on single envs: spaces, dynamics, info keys, action masks, seeding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.envs.core import check_env_specs
from tdrl.envs.libs import GymEnv, GymWrapper, space_to_spec
from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)

gym = pytest.importorskip("gymnasium")
spaces = gym.spaces


class EchoEnv(gym.Env):
    """Observation space == action space; a step returns the action it received."""

    def __init__(self, space, episode_len: int = 4, info: dict | None = None):
        self.observation_space = space
        self.action_space = space
        self.episode_len = episode_len
        self.info = info or {}
        self.resets = 0
        self.received: list = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.t = 0
        self.resets += 1
        return self.observation_space.sample(), {k: f(0) for k, f in self.info.items()}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.received.append(action)
        self.t += 1
        info = {k: f(self.t) for k, f in self.info.items()}
        return action, float(self.t), self.t >= self.episode_len, False, info


SPACES = {
    "box": spaces.Box(-1.0, 1.0, (2, 3), dtype=np.float32),
    "box64": spaces.Box(-np.inf, np.inf, (3,), dtype=np.float64),
    "discrete": spaces.Discrete(4, start=2),
    "multidiscrete": spaces.MultiDiscrete([3, 2, 4], start=[1, 0, -1]),
    "multidiscrete_same_n": spaces.MultiDiscrete([3, 3], start=[1, 0]),
    "scalar_box": spaces.Box(-1.0, 1.0, (), dtype=np.float32),
    "image": spaces.Box(0, 255, (4, 5, 3), dtype=np.uint8),
    "multibinary": spaces.MultiBinary(5),
    "dict": spaces.Dict(
        pos=spaces.Box(-2.0, 2.0, (2,), dtype=np.float32),
        kind=spaces.Discrete(3),
        inner=spaces.Dict(bits=spaces.MultiBinary(2)),
    ),
    "tuple": spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, (1,), dtype=np.float32))),
}


@pytest.mark.parametrize("name", sorted(SPACES))
@pytest.mark.parametrize("categorical", [False, True])
def test_spaces_round_trip(name, categorical):
    space = SPACES[name]
    env = GymWrapper(EchoEnv(space), categorical_action_encoding=categorical)
    check_env_specs(env)
    env.set_seed(0)
    td = env.reset()
    for _ in range(3):
        td = env.step(env.rand_action(td))
        action = td["action"]
        obs = td["next"] if name == "dict" else td["next", "observation"]
        if isinstance(action, torch.Tensor):
            assert torch.equal(obs, action)
        else:
            for key in action.keys(True, True):
                assert torch.equal(obs[key], action[key]), key
        td = env.step_mdp(td)


def test_space_mapping():
    assert isinstance(space_to_spec(SPACES["box"]), Bounded)
    box64 = space_to_spec(SPACES["box64"], batch_size=(2,))
    assert isinstance(box64, Unbounded) and box64.dtype == torch.float64
    assert box64.shape == (2, 3)
    assert isinstance(space_to_spec(SPACES["discrete"]), OneHot)
    cat = space_to_spec(SPACES["discrete"], categorical_action_encoding=True, batch_size=(3,))
    assert isinstance(cat, Categorical) and cat.shape == (3,) and cat.n == 4
    assert isinstance(space_to_spec(SPACES["multidiscrete"]), MultiOneHot)
    md = space_to_spec(SPACES["multidiscrete"], categorical_action_encoding=True)
    assert isinstance(md, MultiCategorical)
    mb = space_to_spec(SPACES["multibinary"])
    assert isinstance(mb, Binary) and mb.dtype == torch.int8
    d = space_to_spec(SPACES["dict"])
    assert isinstance(d, Composite) and d["inner", "bits"].shape == (2,)
    t = space_to_spec(SPACES["tuple"])
    assert sorted(t.keys()) == ["0", "1"]
    with pytest.raises(TypeError, match="unsupported gymnasium space"):
        space_to_spec(spaces.Text(5))


@pytest.mark.parametrize("where", ["action", "observation"])
def test_discrete_spaces_map_as_torchrl(where):
    # TorchRL: Discrete -> int64 OneHot; categorical_action_encoding -> int64 Categorical;
    # the same mapping for observation spaces.
    env = GymWrapper(EchoEnv(spaces.Discrete(3)))
    spec = env.action_spec if where == "action" else env.observation_spec["observation"]
    assert isinstance(spec, OneHot) and spec.dtype == torch.int64 and spec.shape == (3,)
    td = env.rand_step()
    assert td[where if where == "action" else ("next", "observation")].dtype == torch.int64
    env = GymWrapper(EchoEnv(spaces.Discrete(3)), categorical_action_encoding=True)
    spec = env.action_spec if where == "action" else env.observation_spec["observation"]
    assert isinstance(spec, Categorical) and spec.dtype == torch.int64 and spec.shape == ()


def test_one_hot_int64_actions_reach_gymnasium_as_indices():
    inner = EchoEnv(spaces.Discrete(3))
    env = GymWrapper(inner)
    env.step(env.reset().set("action", torch.tensor([0, 0, 1])))
    assert inner.received == [2]
    inner = EchoEnv(spaces.MultiDiscrete([3, 3]))
    env = GymWrapper(inner)
    env.step(env.reset().set("action", torch.tensor([[0, 1, 0], [0, 0, 1]])))
    assert inner.received[-1].tolist() == [1, 2]


def test_other_spaces_map_as_torchrl():
    same = space_to_spec(SPACES["multidiscrete_same_n"], batch_size=(2,))
    assert isinstance(same, OneHot) and same.shape == (2, 2, 3) and same.dtype == torch.int64
    same = space_to_spec(SPACES["multidiscrete_same_n"], categorical_action_encoding=True)
    assert isinstance(same, Categorical) and same.shape == (2,) and same.n == 3
    multi = space_to_spec(SPACES["multidiscrete"])
    assert isinstance(multi, MultiOneHot) and multi.dtype == torch.int64
    scalar = space_to_spec(SPACES["scalar_box"])
    assert isinstance(scalar, Bounded) and scalar.shape == (1,)
    image = space_to_spec(SPACES["image"])  # bounds = the whole uint8 range
    assert isinstance(image, Unbounded) and image.dtype == torch.uint8
    small = space_to_spec(spaces.Box(0, 10, (2,), dtype=np.uint8))
    assert isinstance(small, Bounded) and small.dtype == torch.uint8


def test_discrete_start_offset_is_applied_both_ways():
    inner = EchoEnv(spaces.Discrete(3, start=5))
    env = GymWrapper(inner, categorical_action_encoding=True)
    td = env.reset()
    td = env.step(td.set("action", torch.tensor(2)))
    assert inner.received[-1] == 7
    assert td["next", "observation"].item() == 2


def test_dict_observation_keys_are_at_the_root():
    env = GymWrapper(EchoEnv(SPACES["dict"]))
    assert set(env.observation_keys) == {"kind", "pos", ("inner", "bits")}
    assert ("action", "pos") in env.action_keys


def test_cartpole_matches_raw_gymnasium():
    env = GymEnv("CartPole-v1")
    env.set_seed(3)
    td = env.reset()
    raw = gym.make("CartPole-v1")
    raw.reset(seed=3)  # TorchRL's set_seed resets with the seed at once
    obs, _ = raw.reset()
    np.testing.assert_array_equal(td["observation"].numpy(), obs)
    rng = np.random.default_rng(0)
    for _ in range(60):
        a = int(rng.integers(0, 2))
        td = env.step(td.set("action", torch.nn.functional.one_hot(torch.tensor(a), 2)))
        obs, reward, term, trunc, _ = raw.step(a)
        nxt = td["next"]
        np.testing.assert_array_equal(nxt["observation"].numpy(), obs)
        assert nxt["reward"].item() == reward and nxt["terminated"].item() == term
        td = env.step_mdp(td)
        if term or trunc:
            td = env.reset(td.set("_reset", torch.tensor([True])))
            obs, _ = raw.reset()
            np.testing.assert_array_equal(td["observation"].numpy(), obs)


@pytest.mark.parametrize("categorical", [False, True])
def test_check_env_specs_cartpole_and_pendulum(categorical):
    check_env_specs(
        GymEnv("CartPole-v1", categorical_action_encoding=categorical),
        break_when_any_done=False,
        num_steps=30,
    )
    env = GymEnv("Pendulum-v1")
    check_env_specs(env, break_when_any_done=False, num_steps=30)
    assert env.observation_spec["observation"].dtype == torch.float32


def test_seeding_is_reproducible():
    def run(seed):
        env = GymEnv("CartPole-v1")
        env.set_seed(seed)
        torch.manual_seed(0)
        return env.rollout(30, break_when_any_done=False)["observation"]

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


def test_partial_reset_of_a_single_env_only_when_asked():
    inner = EchoEnv(SPACES["box"], episode_len=2)
    env = GymWrapper(inner)
    td = env.reset()
    resets = inner.resets
    kept = env.reset(td.clone().set("_reset", torch.tensor([False])))
    assert inner.resets == resets and torch.equal(kept["observation"], td["observation"])
    data = env.rollout(6, break_when_any_done=False)
    # the rollout's reset, then one per episode end but the last step's (TorchRL)
    assert inner.resets == resets + 1 + 2
    assert data["next", "done"].sum() == 3


def test_info_keys_inferred_from_reset():
    info = {
        "x": lambda t: 0.5 * t,
        "count": lambda t: t,
        "flag": lambda t: t % 2 == 1,
        "vec": lambda t: np.full(3, t, dtype=np.float64),
    }
    env = GymWrapper(EchoEnv(SPACES["box"], info=info), info_keys=["x", "count", "flag", "vec"])
    spec = env.observation_spec
    assert spec["x"].dtype == torch.float32 and spec["x"].shape == ()
    assert spec["count"].dtype == torch.int64 and spec["flag"].dtype == torch.bool
    assert spec["vec"].shape == (3,) and spec["vec"].dtype == torch.float32
    check_env_specs(env)
    data = env.rollout(3)
    assert data["next", "x"].tolist() == [0.5, 1.0, 1.5]
    assert data["next", "count"].tolist() == [1, 2, 3]
    assert data["next", "flag"].tolist() == [True, False, True]
    assert data["count"].tolist() == [0, 1, 2]


def test_info_keys_with_explicit_specs_and_missing_keys():
    class StepOnlyInfo(EchoEnv):
        def step(self, action):
            obs, r, term, trunc, _ = super().step(action)
            return obs, r, term, trunc, {"score": r * 2} if self.t % 2 else {}

    env = GymWrapper(StepOnlyInfo(SPACES["box"]), info_keys={"score": Unbounded(shape=())})
    check_env_specs(env)
    data = env.rollout(3)
    assert data["next", "score"].tolist() == [2.0, 0.0, 6.0]
    with pytest.raises(KeyError, match="available keys"):
        GymWrapper(StepOnlyInfo(SPACES["box"]), info_keys=["score"])


def test_action_mask_from_info():
    def mask(t):
        out = np.zeros(4, dtype=np.int8)
        out[[t % 4, (t + 1) % 4]] = 1
        return out

    env = GymWrapper(EchoEnv(spaces.Discrete(4), episode_len=50, info={"action_mask": mask}))
    spec = env.observation_spec["action_mask"]
    assert isinstance(spec, Binary) and spec.dtype == torch.bool
    check_env_specs(env)
    td = env.reset()
    for t in range(6):
        assert td["action_mask"].tolist() == mask(t).astype(bool).tolist()
        env.action_spec.update_mask(td["action_mask"])
        td = env.step(env.rand_action(td))
        assert td["action_mask"][td["action"].bool()].all()
        td = env.step_mdp(td)


def test_closing_is_idempotent():
    env = GymEnv("CartPole-v1")
    env.close()
    env.close()
    assert env.is_closed
