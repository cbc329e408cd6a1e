"""CartPoleEnv: gymnasium-equal dynamics, truncation, partial resets, seeding and specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.builtin import CartPoleEnv
from tdrl.envs.core import check_env_specs

BATCHES = [(), (2, 3)]


def _one_hot(push_right: np.ndarray) -> torch.Tensor:
    idx = torch.as_tensor(push_right, dtype=torch.int64)
    return torch.nn.functional.one_hot(idx, 2)


def _gym_envs(n: int, seed: int) -> tuple[list, np.ndarray]:
    gym = pytest.importorskip("gymnasium")
    envs = [gym.make("CartPole-v1") for _ in range(n)]
    states = []
    for i, e in enumerate(envs):
        e.reset(seed=seed + i)
        # Start both sides from the same float32-representable state.
        e.unwrapped.state = e.unwrapped.state.astype(np.float32).astype(np.float64)
        states.append(e.unwrapped.state)
    return envs, np.stack(states)


@pytest.mark.parametrize("seed", [0, 7])
def test_trajectories_match_gymnasium(seed):
    n = 4
    gym_envs, states = _gym_envs(n, seed)
    env = CartPoleEnv(batch_size=(n,))
    td = env.set_state(torch.as_tensor(states, dtype=torch.float32))
    np.testing.assert_allclose(td["observation"].numpy(), states, atol=1e-7)
    rng = np.random.default_rng(seed)
    alive = np.ones(n, dtype=bool)
    steps = 0
    while alive.any():
        actions = rng.integers(0, 2, size=n)
        td = env.step(td.set("action", _one_hot(actions)))
        nxt = td["next"]
        steps += 1
        for i, e in enumerate(gym_envs):
            if not alive[i]:
                continue
            obs, reward, term, trunc, _ = e.step(int(actions[i]))
            np.testing.assert_allclose(nxt["observation"][i].numpy(), obs, atol=1e-5)
            assert nxt["reward"][i].item() == reward == 1.0
            assert nxt["terminated"][i].item() == term
            assert nxt["truncated"][i].item() == trunc
            assert nxt["done"][i].item() == (term or trunc)
            alive[i] = not (term or trunc)
        td = env.step_mdp(td)
    assert 5 < steps < 200


def _balance(obs: np.ndarray) -> int:
    x, x_dot, theta, theta_dot = obs
    return int(theta + 0.5 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


def test_truncation_step_matches_gymnasium():
    gym_envs, states = _gym_envs(1, 3)
    gym_env = gym_envs[0]
    env = CartPoleEnv()
    td = env.set_state(torch.as_tensor(states[0], dtype=torch.float32))
    steps = 0
    for _ in range(500):
        steps += 1
        action = _balance(td["observation"].numpy())
        # Re-sync gymnasium to our (float32) state so that only one step is compared at a time.
        gym_env.unwrapped.state = env.state.double().numpy()
        obs, _, term, trunc, _ = gym_env.step(action)
        td = env.step(td.set("action", _one_hot(np.array(action))))
        nxt = td["next"]
        np.testing.assert_allclose(nxt["observation"].numpy(), obs, atol=1e-6)
        assert (nxt["terminated"].item(), nxt["truncated"].item()) == (term, trunc)
        td = env.step_mdp(td)
        if term or trunc:
            break
    assert steps == 500 and trunc and not term


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("categorical", [False, True])
def test_check_env_specs(batch, categorical):
    env = CartPoleEnv(batch_size=batch, categorical_action_encoding=categorical)
    check_env_specs(env)
    expected = batch if categorical else (*batch, 2)
    assert env.action_spec.shape == torch.Size(expected)


def test_categorical_and_one_hot_give_the_same_trajectory():
    actions = torch.randint(0, 2, (30, 5), generator=torch.Generator().manual_seed(0))
    out = []
    for categorical in (False, True):
        env = CartPoleEnv(batch_size=(5,), categorical_action_encoding=categorical)
        env.set_seed(11)
        td = env.reset()
        obs = []
        for a in actions:
            td["action"] = a if categorical else _one_hot(a.numpy())
            td, td = env.step_and_maybe_reset(td)
            obs.append(td["observation"])
        out.append(torch.stack(obs))
    torch.testing.assert_close(out[0], out[1])


def test_reset_state_is_uniform_in_range():
    env = CartPoleEnv(batch_size=(4096,))
    obs = env.reset()["observation"]
    assert obs.abs().max() <= 0.05
    assert obs.abs().max() > 0.049 and obs.mean().abs() < 0.01


def test_partial_reset_only_touches_masked_members():
    env = CartPoleEnv(batch_size=(3,))
    td = env.reset()
    for _ in range(5):
        td = env.step_mdp(env.step(td.set("action", _one_hot(np.array([1, 1, 1])))))
    before = env.state
    mask = torch.tensor([[True], [False], [True]])
    td = env.reset(td.set("_reset", mask))
    after = env.state
    torch.testing.assert_close(after[1], before[1])
    assert not torch.equal(after[0], before[0])
    torch.testing.assert_close(td["observation"], after)
    assert "_reset" not in td.keys()


def test_partial_reset_keeps_the_step_counter_of_other_members():
    env = CartPoleEnv(batch_size=(2,), max_episode_steps=8)
    td = env.set_state(torch.zeros(4))
    truncated = []
    for t in range(8):
        if t == 5:
            td = env.reset(td.set("_reset", torch.tensor([[True], [False]])))
        td = env.step(td.set("action", _one_hot(np.array([t % 2, t % 2]))))
        truncated.append(td["next", "truncated"].squeeze(-1).tolist())
        assert not td["next", "terminated"].any()
        td = env.step_mdp(td)
    assert truncated[-1] == [False, True] and not any(map(any, truncated[:-1]))


def test_seeding_is_reproducible():
    def run(seed: int) -> TensorDict:
        env = CartPoleEnv(batch_size=(4,))
        env.set_seed(seed)
        torch.manual_seed(0)
        return env.rollout(50, break_when_any_done=False)

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a["observation"], b["observation"])
    assert not torch.equal(a["observation"], c["observation"])


def test_rollout_resets_done_members_and_rewards_are_one():
    env = CartPoleEnv(batch_size=(16,))
    env.set_seed(0)
    td = env.rollout(100, break_when_any_done=False)
    assert td["next", "reward"].eq(1).all()
    done = td["next", "done"].squeeze(-1)
    assert done.any()
    # After a done step the next root observation is a fresh reset state.
    b, t = done[:, :-1].nonzero(as_tuple=True)
    assert td["observation"][b, t + 1].abs().max() <= 0.05


def test_invalid_horizon_raises():
    with pytest.raises(ValueError, match="max_episode_steps"):
        CartPoleEnv(max_episode_steps=0)


def test_partial_reset_keeps_the_done_flags_and_extra_entries_of_other_members():
    env = CartPoleEnv(batch_size=(2,))
    td = env.reset()
    td["done"] = torch.tensor([[True], [True]])
    td["terminated"] = torch.tensor([[True], [False]])
    td["truncated"] = torch.tensor([[False], [True]])
    td["hidden"] = torch.ones(2, 3)
    out = env.reset(td.set("_reset", torch.tensor([[True], [False]])))
    assert out["done"].squeeze(-1).tolist() == [False, True]
    assert out["terminated"].squeeze(-1).tolist() == [False, False]
    assert out["truncated"].squeeze(-1).tolist() == [False, True]
    assert out["hidden"].eq(1).all()
    torch.testing.assert_close(out["observation"], env.state)
