"""PendulumV1Env: gymnasium-equal dynamics and rewards, truncation, partial resets, specs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tdrl.envs.builtin import PendulumV1Env
from tdrl.envs.core import check_env_specs

BATCHES = [(), (2, 3)]


def _gym_pendulum(seed: int, g: float = 10.0):
    gym = pytest.importorskip("gymnasium")
    env = gym.make("Pendulum-v1", g=g)
    env.reset(seed=seed)
    env.unwrapped.state = env.unwrapped.state.astype(np.float32).astype(np.float64)
    return env


@pytest.mark.parametrize(("seed", "g"), [(0, 10.0), (5, 9.81)])
def test_free_running_trajectory_matches_gymnasium(seed, g):
    gym_env = _gym_pendulum(seed, g)
    env = PendulumV1Env(g=g)
    td = env.set_state(torch.as_tensor(gym_env.unwrapped.state, dtype=torch.float32))
    rng = np.random.default_rng(seed)
    for _ in range(60):
        # Torques beyond the bounds are clipped by both implementations.
        action = rng.uniform(-2.5, 2.5, size=(1,)).astype(np.float32)
        obs, reward, term, trunc, _ = gym_env.step(action)
        td = env.step(td.set("action", torch.as_tensor(action)))
        nxt = td["next"]
        np.testing.assert_allclose(nxt["observation"].numpy(), obs, atol=1e-4)
        np.testing.assert_allclose(nxt["reward"].item(), reward, rtol=1e-4, atol=1e-4)
        assert not nxt["terminated"].item() and not term and not trunc
        td = env.step_mdp(td)


def test_truncation_step_matches_gymnasium():
    gym_env = _gym_pendulum(2)
    env = PendulumV1Env()
    td = env.set_state(torch.as_tensor(gym_env.unwrapped.state, dtype=torch.float32))
    rng = np.random.default_rng(0)
    steps = 0
    for _ in range(200):
        steps += 1
        action = rng.uniform(-2.0, 2.0, size=(1,)).astype(np.float32)
        # One step at a time from the same state: float32 vs float64 drift cannot build up.
        gym_env.unwrapped.state = env.state.double().numpy()
        obs, reward, term, trunc, _ = gym_env.step(action)
        td = env.step(td.set("action", torch.as_tensor(action)))
        nxt = td["next"]
        np.testing.assert_allclose(nxt["observation"].numpy(), obs, atol=1e-5)
        np.testing.assert_allclose(nxt["reward"].item(), reward, rtol=1e-5, atol=1e-5)
        assert (nxt["terminated"].item(), nxt["truncated"].item()) == (term, trunc)
        td = env.step_mdp(td)
        if trunc:
            break
    assert steps == 200 and trunc


def test_reward_uses_the_normalized_angle():
    env = PendulumV1Env()
    # theta = 2*pi is upright: only the velocity and torque costs remain.
    td = env.set_state(torch.tensor([2 * math.pi, 1.0]))
    td = env.step(td.set("action", torch.tensor([1.0])))
    assert td["next", "reward"].item() == pytest.approx(-(0.1 + 0.001), abs=1e-4)


@pytest.mark.parametrize("batch", BATCHES)
def test_check_env_specs(batch):
    check_env_specs(PendulumV1Env(batch_size=batch))


def test_reset_distribution():
    env = PendulumV1Env(batch_size=(4096,))
    td = env.reset()
    state = env.state
    assert state[:, 0].abs().max() <= math.pi and state[:, 0].abs().max() > 3.1
    assert state[:, 1].abs().max() <= 1.0 and state[:, 1].abs().max() > 0.99
    torch.testing.assert_close(td["observation"][:, 2], state[:, 1])


def test_partial_reset_keeps_other_members():
    env = PendulumV1Env(batch_size=(2,))
    td = env.reset()
    td = env.step_mdp(env.step(td.set("action", torch.zeros(2, 1))))
    before = env.state
    td = env.reset(td.set("_reset", torch.tensor([[False], [True]])))
    torch.testing.assert_close(env.state[0], before[0])
    assert not torch.equal(env.state[1], before[1])
    theta = env.state[:, 0]
    torch.testing.assert_close(td["observation"][:, 0], theta.cos())


def test_seeding_is_reproducible():
    def first_obs(seed: int) -> torch.Tensor:
        env = PendulumV1Env(batch_size=(3,))
        env.set_seed(seed)
        return env.reset()["observation"]

    assert torch.equal(first_obs(4), first_obs(4))
    assert not torch.equal(first_obs(4), first_obs(5))


def test_move_state_moves_tensor_attributes_and_keeps_same_device_generators():
    from tdrl.envs.builtin._common import move_state

    class Holder:
        pass

    h = Holder()
    h.state = torch.ones(2)
    rng = torch.Generator()
    move_state(h, torch.device("meta"))  # meta: a second device without an accelerator
    assert h.state.device == torch.device("meta") and h.state.shape == (2,)
    g = Holder()
    g.rng = rng
    move_state(g, torch.device("cpu"))
    assert g.rng is rng


def test_pendulum_to_its_own_device_is_a_no_op():
    env = PendulumV1Env(batch_size=(2,))
    state = env._state
    assert env.to("cpu") is env and env._state is state
