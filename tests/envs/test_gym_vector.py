"""Gymnasium vector envs: batch mapping and autoreset handling (no transition lost or repeated)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.envs.core import check_env_specs
from tdrl.envs.libs import GymEnv, GymWrapper

gym = pytest.importorskip("gymnasium")
AutoresetMode = gym.vector.AutoresetMode

T = 40
HORIZON = 12


def _actions(num_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=(T, num_envs))


def _rollout(env, actions: np.ndarray):
    step = iter(range(T))

    def policy(td):
        a = torch.as_tensor(actions[next(step)])
        return td.set("action", torch.nn.functional.one_hot(a, 2))

    return env.rollout(T, policy, break_when_any_done=False)


def _assert_matches_single_envs(data, actions: np.ndarray, seed: int) -> None:
    """Sub-env i must replay exactly what a lone env seeded ``seed + i`` produces (TorchRL's
    set_seed resets with the seed at once: the rollout starts at the next reset)."""
    episodes_ended = 0
    for i in range(actions.shape[1]):
        single = gym.make("CartPole-v1", max_episode_steps=HORIZON)
        single.reset(seed=seed + i)
        obs, _ = single.reset()
        for t in range(T):
            np.testing.assert_array_equal(data["observation"][i, t].numpy(), obs)
            nobs, reward, term, trunc, _ = single.step(int(actions[t, i]))
            nxt = data["next"][i, t]
            np.testing.assert_array_equal(nxt["observation"].numpy(), nobs)
            assert nxt["reward"].item() == reward
            assert (nxt["terminated"].item(), nxt["truncated"].item()) == (term, trunc)
            obs = nobs
            if term or trunc:
                episodes_ended += 1
                obs, _ = single.reset()
    assert episodes_ended >= actions.shape[1] * 2


def test_sync_vector_env_matches_single_envs():
    env = GymEnv("CartPole-v1", num_envs=3, max_episode_steps=HORIZON)
    assert env.batch_size == (3,)
    assert env.action_spec.shape == (3, 2)
    env.set_seed(5)
    actions = _actions(3)
    data = _rollout(env, actions)
    assert data.batch_size == (3, T)
    _assert_matches_single_envs(data, actions, seed=5)
    env.close()


@pytest.mark.timeout(60)
def test_async_vector_env_matches_single_envs():
    env = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="async", max_episode_steps=HORIZON)
    try:
        env.set_seed(1)
        actions = _actions(2, seed=1)
        _assert_matches_single_envs(_rollout(env, actions), actions, seed=1)
    finally:
        env.close()


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_wrapped_vector_env_in_other_autoreset_modes(mode):
    fns = [lambda: gym.make("CartPole-v1", max_episode_steps=HORIZON)] * 3
    env = GymWrapper(gym.vector.SyncVectorEnv(fns, autoreset_mode=mode))
    env.set_seed(9)
    actions = _actions(3, seed=2)
    _assert_matches_single_envs(_rollout(env, actions), actions, seed=9)


@pytest.mark.parametrize("categorical", [False, True])
def test_check_env_specs_vector(categorical):
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=categorical)
    check_env_specs(env, break_when_any_done=False, num_steps=30)
    assert env.action_spec.shape == ((2,) if categorical else (2, 2))


class CountingEcho(gym.Env):
    """Discrete(4) echo env with ``info["count"]`` and an ``action_mask``; ends after 3 steps."""

    observation_space = gym.spaces.Discrete(4)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, self._info()

    def _info(self):
        mask = np.zeros(4, dtype=np.int8)
        mask[self.t % 4] = 1
        return {"count": self.t, "action_mask": mask}

    def step(self, action):
        self.t += 1
        return int(action), 1.0, self.t >= 3, False, self._info()


@pytest.mark.parametrize("mode", [AutoresetMode.DISABLED, AutoresetMode.SAME_STEP])
def test_vector_info_keys_and_action_mask(mode):
    vec = gym.vector.SyncVectorEnv([CountingEcho] * 2, autoreset_mode=mode)
    env = GymWrapper(vec, info_keys=["count"])
    assert env.observation_spec["count"].shape == (2,)
    assert env.observation_spec["action_mask"].shape == (2, 4)
    check_env_specs(env)
    td = env.reset()
    for _ in range(7):
        env.action_spec.update_mask(td["action_mask"])
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        count = td["next", "count"]
        # The final step of an episode reports its own info, then the reset one follows.
        assert torch.equal(td["next", "done"].squeeze(-1), count == 3)
        assert torch.equal(td["next", "observation"], td["action"])
        assert root["count"].max() < 3 and not root["done"].any()
        assert torch.equal(root["action_mask"].long().argmax(-1), root["count"] % 4)
        td = root
