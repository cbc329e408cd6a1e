"""GymEnv/GymWrapper ``from_pixels``: rendered rgb_array frames under ``"pixels"``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.envs.core import check_env_specs
from tdrl.envs.libs import GymEnv, GymWrapper
from tdrl.specs import Unbounded

gym = pytest.importorskip("gymnasium")
spaces = gym.spaces


class Canvas(gym.Env):
    """Renders a 6x8 RGB frame filled with the step count (no display, no pygame)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(2, self.t / 10, np.float32), 1.0, self.t >= 5, False, {}

    def render(self):
        return np.full((6, 8, 3), self.t, dtype=np.uint8)


gym.register("TdrlCanvas-v0", entry_point=Canvas)


def test_gym_env_from_pixels_returns_only_the_frames_by_default():
    env = GymEnv("TdrlCanvas-v0", from_pixels=True)
    assert list(env.observation_spec.keys()) == ["pixels"]
    spec = env.observation_spec["pixels"]
    assert isinstance(spec, Unbounded) and spec.shape == (6, 8, 3) and spec.dtype == torch.uint8
    data = env.rollout(3)
    assert data["pixels"].shape == (3, 6, 8, 3) and data["pixels"].dtype == torch.uint8
    assert data["pixels"][:, 0, 0, 0].tolist() == [0, 1, 2]
    assert data["next", "pixels"][:, 0, 0, 0].tolist() == [1, 2, 3]
    check_env_specs(env)


def test_pixels_only_false_keeps_the_state_observation():
    env = GymEnv("TdrlCanvas-v0", from_pixels=True, pixels_only=False)
    assert sorted(env.observation_spec.keys()) == ["observation", "pixels"]
    data = env.rollout(2)
    assert data["next", "observation"][-1].tolist() == pytest.approx([0.2, 0.2])


def test_wrapper_keeps_both_by_default_and_needs_rgb_array():
    env = GymWrapper(gym.make("TdrlCanvas-v0", render_mode="rgb_array"), from_pixels=True)
    assert sorted(env.observation_spec.keys()) == ["observation", "pixels"]
    with pytest.raises(ValueError, match=r"from_pixels needs an env that renders rgb_array"):
        GymWrapper(gym.make("TdrlCanvas-v0"), from_pixels=True)


def test_refused_arguments():
    with pytest.raises(ValueError, match="frame_skip must be an int >= 1"):
        GymEnv("TdrlCanvas-v0", frame_skip=0)
    with pytest.raises(TypeError, match="no env to wrap"):
        GymWrapper()
    with pytest.raises(ValueError, match="vector envs"):
        GymEnv("TdrlCanvas-v0", num_envs=2, from_pixels=True)
