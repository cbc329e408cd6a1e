"""GymRows: gymnasium envs stepped straight into a batched env's rows give the general data."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.libs import GymEnv
from tdrl.errors import SpecError, WorkerError
from tdrl.testing import assert_same_data


class GeneralGymEnv(GymEnv):
    """Overrides a hook: batched envs then use the public methods (the general path)."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return super()._step(tensordict)


class ScalarObs(gym.Env):
    """A scalar Box observation (shape ()), Box action, episodes of 3 steps."""

    observation_space = gym.spaces.Box(-10.0, 10.0, shape=(), dtype=np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.float64(self.np_random.uniform()), {}

    def step(self, action):
        self.t += 1
        return np.float64(action.sum() + self.t), float(self.t), False, self.t >= 3, {}


CASES = {
    "cartpole_one_hot": ("CartPole-v1", {}),
    "cartpole_categorical": ("CartPole-v1", {"categorical_action_encoding": True}),
    "pendulum": ("Pendulum-v1", {"max_episode_steps": 7}),
    "scalar_obs": ("tdrl-test/ScalarObs-v0", {}),
}
gym.register("tdrl-test/ScalarObs-v0", entry_point=ScalarObs)


def _pair(case: str, n: int = 3) -> tuple[SerialEnv, SerialEnv]:
    name, kwargs = CASES[case]
    fast = SerialEnv(n, lambda: GymEnv(name, **kwargs))
    slow = SerialEnv(n, lambda: GeneralGymEnv(name, **kwargs))
    fast.set_seed(3)
    slow.set_seed(3)
    return fast, slow


@pytest.mark.parametrize("case", sorted(CASES))
def test_rows_step_like_the_general_path(case):
    fast, slow = _pair(case)
    assert all(r._writer is not None for r in fast._runners)  # the rows path runs
    assert all(r._writer is None for r in slow._runners)  # the general path runs
    torch.manual_seed(0)
    actions = [fast.rand_action()["action"] for _ in range(40)]
    fa, sa = fast.reset(), slow.reset()
    assert_same_data(fa, sa)
    for i, action in enumerate(actions):
        fa.set("action", action)
        sa.set("action", action)
        if i % 2:  # both ways a batched env steps its sub-envs
            (f_out, fa), (s_out, sa) = fast.step_and_maybe_reset(fa), slow.step_and_maybe_reset(sa)
        else:
            f_out, s_out = fast.step(fa), slow.step(sa)
            fa, sa = fast.maybe_reset(fast.step_mdp(f_out)), slow.maybe_reset(slow.step_mdp(s_out))
        assert_same_data(f_out, s_out)
        assert_same_data(fa, sa)
    fast.close()
    slow.close()


@pytest.mark.timeout(60)
def test_rows_in_worker_processes_like_the_general_path():
    name, kwargs = CASES["cartpole_categorical"]
    fast = ParallelEnv(2, lambda: GymEnv(name, **kwargs), mp_start_method="fork")
    slow = SerialEnv(2, lambda: GeneralGymEnv(name, **kwargs))
    fast.set_seed(1)
    slow.set_seed(1)
    torch.manual_seed(0)
    fa, sa = fast.reset(), slow.reset()
    for _ in range(40):
        action = fast.rand_action()["action"]
        (f_out, fa), (s_out, sa) = (
            fast.step_and_maybe_reset(fa.set("action", action)),
            slow.step_and_maybe_reset(sa.set("action", action)),
        )
        assert_same_data(f_out, s_out)
        assert_same_data(fa, sa)
    fast.close()
    slow.close()


class WrongShape(ScalarObs):
    def step(self, action):
        return np.zeros(3), 0.0, False, False, {}


gym.register("tdrl-test/WrongShape-v0", entry_point=WrongShape)


def test_a_wrong_observation_shape_raises_as_in_the_general_path():
    env = SerialEnv(2, lambda: GymEnv("tdrl-test/WrongShape-v0"))
    td = env.rand_action(env.reset())
    with pytest.raises(SpecError, match="wrong shape"):
        env.step(td)
    general = SerialEnv(2, lambda: GeneralGymEnv("tdrl-test/WrongShape-v0"))
    with pytest.raises((SpecError, WorkerError, RuntimeError), match="shape"):
        general.step(general.rand_action(general.reset()))


def test_a_deep_copy_of_a_started_env_steps_its_own_rows():
    fast, slow = _pair("cartpole_categorical", 2)
    fast.reset()  # the steppers exist
    twin = copy.deepcopy(fast)
    twin.set_seed(3)
    ta, sa = twin.reset(), slow.reset()
    for _ in range(30):
        action = twin.rand_action()["action"]
        (t_out, ta), (s_out, sa) = (
            twin.step_and_maybe_reset(ta.set("action", action)),
            slow.step_and_maybe_reset(sa.set("action", action)),
        )
        assert_same_data(t_out, s_out)
    assert fast._buffers.next.td["observation"].abs().sum() == 0  # the original is untouched
