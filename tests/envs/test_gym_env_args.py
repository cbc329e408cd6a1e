"""GymEnv/GymWrapper accept TorchRL's arguments with TorchRL's meaning (frame_skip, seeding,
batch_size, allow_done_after_reset, disable_env_checker, backend, attribute forwarding)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdrl.envs.batched import SerialEnv
from tdrl.envs.libs import GymEnv, GymWrapper
from tdrl.specs import Bounded, Unbounded

gym = pytest.importorskip("gymnasium")


class SkipCounter(gym.Env):
    """Skips frames itself (like the Atari envs): observation = frames played so far."""

    def __init__(self, frameskip: int = 4):
        self.frameskip = frameskip
        self.observation_space = gym.spaces.Box(0.0, np.inf, (1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.frames = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.frames += self.frameskip
        return np.full(1, self.frames, np.float32), 1.0, False, False, {}


gym.register("TdrlSkipCounter-v0", entry_point=SkipCounter)


def _pendulum_actions(n):
    return [torch.tensor([float(a)]) for a in np.linspace(-2.0, 2.0, n)]


def test_set_seed_resets_at_once_as_torchrl():
    env = GymEnv("Pendulum-v1")
    env.set_seed(4)
    raw = gym.make("Pendulum-v1")
    first, _ = raw.reset(seed=4)
    second, _ = raw.reset()
    obs = env.reset()["observation"].numpy()
    np.testing.assert_array_equal(obs, second)  # TorchRL: the seeded reset already happened
    assert not np.array_equal(obs, first)


@pytest.mark.parametrize("skip", [1, 3])
def test_frame_skip_repeats_the_action_and_sums_rewards(skip):
    env = GymEnv("Pendulum-v1", frame_skip=skip)
    assert env.frame_skip == skip and env.wrapper_frame_skip == skip
    env.set_seed(0)
    td = env.reset()
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=0)
    raw.reset()
    for action in _pendulum_actions(4):
        td = env.step(td.set("action", action))
        total = 0.0
        for _ in range(skip):
            obs, reward, *_ = raw.step(action.numpy())
            total += reward
        np.testing.assert_allclose(td["next", "observation"].numpy(), obs, rtol=1e-6)
        assert td["next", "reward"].item() == pytest.approx(total, rel=1e-6)
        td = env.step_mdp(td)


def test_frame_skip_stops_when_the_episode_ends():
    env = GymEnv("Pendulum-v1", frame_skip=4, max_episode_steps=6)
    td = env.reset()
    td = env.step(td.set("action", torch.zeros(1)))
    assert not td["next", "done"].item()
    td = env.step(env.step_mdp(td).set("action", torch.zeros(1)))
    # 4 + 2 steps: the time limit ends the episode inside the second repetition
    assert td["next", "truncated"].item() and td["next", "done"].item()
    assert env.env._elapsed_steps == 6


def test_frame_skip_of_a_wrapped_env_and_in_batched_envs():
    env = GymWrapper(gym.make("Pendulum-v1"), frame_skip=2)
    assert env.wrapper_frame_skip == 2
    batched = SerialEnv(2, lambda: GymEnv("Pendulum-v1", frame_skip=2, max_episode_steps=4))
    data = batched.rollout(3)
    assert all(r._writer is None for r in batched._runners)  # rows cannot skip frames
    assert data["next", "truncated"][:, 1].all()  # 2 x 2 steps: the time limit at step 2


def test_an_env_that_skips_frames_itself_gets_frameskip():
    env = GymEnv("TdrlSkipCounter-v0", frame_skip=3)
    assert env.env.unwrapped.frameskip == 3 and env.wrapper_frame_skip == 1
    assert env.rollout(2)["next", "observation"].flatten().tolist() == [3.0, 6.0]
    # TorchRL hands frameskip=frame_skip (1 by default) to such envs
    assert GymEnv("TdrlSkipCounter-v0").env.unwrapped.frameskip == 1
    with pytest.raises(ValueError, match="pass frame_skip, not frameskip"):
        GymEnv("TdrlSkipCounter-v0", frameskip=4)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_bad_frame_skip(bad):
    with pytest.raises(ValueError, match=rf"frame_skip must be an int >= 1 \(got {bad!r}\)"):
        GymEnv("Pendulum-v1", frame_skip=bad)


def test_batch_size_allow_done_after_reset_and_num_envs_zero():
    env = GymEnv("Pendulum-v1", batch_size=[], allow_done_after_reset=True, num_envs=0)
    assert env.batch_size == () and env.allow_done_after_reset
    assert GymEnv("CartPole-v1", num_envs=2, batch_size=[2]).batch_size == (2,)
    with pytest.raises(ValueError, match="batch_size differs"):
        GymEnv("Pendulum-v1", batch_size=[3])


def _wrappers(env):
    names = []
    while hasattr(env, "env"):
        names.append(type(env).__name__)
        env = env.env
    return names


def test_env_checker_is_off_by_default_as_torchrl():
    assert "PassiveEnvChecker" not in _wrappers(GymEnv("Pendulum-v1").env)
    assert "PassiveEnvChecker" in _wrappers(GymEnv("Pendulum-v1", disable_env_checker=False).env)


def test_backend_and_num_workers():
    assert GymEnv("Pendulum-v1", backend="gymnasium").batch_size == ()
    with pytest.raises(ValueError, match="gymnasium only"):
        GymEnv("Pendulum-v1", backend="gym")
    assert GymEnv("Pendulum-v1", num_workers=1).batch_size == ()
    with pytest.raises(ValueError, match=r"num_workers is not supported .*ParallelEnv"):
        GymEnv("Pendulum-v1", num_workers=2)


def test_public_attributes_come_from_the_gymnasium_env():
    env = GymEnv("Pendulum-v1", max_episode_steps=7)
    assert env.spec.max_episode_steps == 7
    assert env.unwrapped is env.env.unwrapped
    with pytest.raises(AttributeError, match="nor has the gymnasium env"):
        env.no_such_attribute  # noqa: B018
    with pytest.raises(AttributeError):
        env._np_random  # noqa: B018 (private names are not forwarded)


def test_box_with_some_infinite_bounds_is_bounded_as_torchrl():
    spec = GymEnv("CartPole-v1").observation_spec["observation"]
    assert isinstance(spec, Bounded)
    assert math.isinf(spec.space.high[1].item()) and spec.space.high[0].item() == pytest.approx(4.8)
    assert spec.is_in(spec.rand())
    box = gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32)
    assert isinstance(GymWrapper(_BoxEnv(box)).observation_spec["observation"], Unbounded)


class _BoxEnv(gym.Env):
    def __init__(self, space):
        self.observation_space = space
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def test_batched_gym_envs_seed_each_worker_with_the_chain():
    env = SerialEnv(3, lambda: GymEnv("Pendulum-v1"))
    nxt = env.set_seed(5)
    seeds, seed = [], 5
    for _ in range(3):  # worker i + 1 gets the seed worker i's set_seed returned (TorchRL)
        seeds.append(seed)
        seed = GymEnv("Pendulum-v1").set_seed(seed)
    assert nxt == seed
    expected = []
    for s in seeds:
        raw = gym.make("Pendulum-v1")
        raw.reset(seed=s)
        expected.append(raw.reset()[0])
    np.testing.assert_array_equal(env.reset()["observation"].numpy(), np.stack(expected))


def test_gym_wrapper_takes_spec_locked_as_torchrl():
    import gymnasium

    env = GymWrapper(gymnasium.make("CartPole-v1"), spec_locked=False)
    assert env.spec_locked is False
    assert GymWrapper(gymnasium.make("CartPole-v1")).spec_locked is True
    assert env.rollout(3)["next", "observation"].shape == (3, 4)
