"""make_atari_env against gymnasium's AtariPreprocessing + FrameStackObservation, frame for frame."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")
cv2 = pytest.importorskip("cv2")

from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation  # noqa: E402

from tdrl.envs import (  # noqa: E402
    EndOfLifeTransform,
    FrameSkipTransform,
    NoopResetEnv,
    ParallelEnv,
    Resize,
    check_env_specs,
    make_atari_env,
)
from tdrl.testing import CountingEnv  # noqa: E402

gym.register_envs(ale_py)
GAME = "ALE/Breakout-v5"


def _reference(noop_max: int = 0):
    env = gym.make(GAME, frameskip=1)
    return FrameStackObservation(AtariPreprocessing(env, noop_max=noop_max), 4)


def _step(env, td, action: int):
    td["action"] = torch.tensor(action)
    return env.step(td)


def test_matches_gymnasium_frame_for_frame():
    # Sticky actions on (v5's 0.25): the two runs only stay together if the game's random
    # draws happen for the same frames, so this also checks that no frame is played past an
    # episode end. The action sequence ends Breakout's first episode at step 186.
    seed = 0
    ref = _reference()
    env = make_atari_env(GAME, noop_max=0, sign_reward=False, categorical_action_encoding=True)
    env.set_seed(seed)
    obs, _ = ref.reset(seed=seed)
    td = env.reset()
    game = env.base_env.env.unwrapped.ale
    assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (4, 84, 84)
    np.testing.assert_array_equal(td["pixels"].numpy(), obs)
    actions = np.random.default_rng(1).integers(ref.action_space.n, size=200)
    lives, ends, rewards = ref.unwrapped.ale.lives(), 0, 0.0
    for t, action in enumerate(actions.tolist()):
        obs, reward, term, trunc, info = ref.step(action)
        td = _step(env, td, action)
        nxt = td["next"]
        end = term or trunc
        if not end:
            # gymnasium's screen on the step an episode ends is a stale one (its frame buffers
            # are not filled once it stops early); every other screen is the same
            np.testing.assert_array_equal(nxt["pixels"].numpy(), obs, err_msg=f"step {t}")
        assert float(nxt["reward"]) == reward, t
        assert bool(nxt["terminated"]) == term and bool(nxt["truncated"]) == trunc, t
        assert bool(nxt["end-of-life"]) == (info["lives"] < lives or end), t
        assert int(nxt["lives"]) == info["lives"], t
        # no frame played past an episode end (the game's frame counters agree)
        assert game.getFrameNumber() == ref.unwrapped.ale.getFrameNumber(), t
        lives, rewards = info["lives"], rewards + reward
        if end:
            ends += 1
            obs, _ = ref.reset()
            td = env.reset()
            np.testing.assert_array_equal(td["pixels"].numpy(), obs)
            lives = ref.unwrapped.ale.lives()
        else:
            td = env.step_mdp(td)
    assert ends >= 1 and rewards > 0  # the run went through an episode end and scored
    env.close()
    ref.close()


def test_noop_reset_matches_gymnasium():
    # gymnasium draws the NOOP count from the game's generator; tdrl from torch's. With the
    # count gymnasium draws for this seed fixed on tdrl's side, the starts are the same.
    seed, noop_max = 3, 30
    probe = gym.make(GAME, frameskip=1)
    probe.reset(seed=seed)
    count = int(probe.unwrapped.np_random.integers(1, noop_max + 1))
    probe.close()
    ref = _reference(noop_max)
    env = make_atari_env(GAME, noop_max=count, sign_reward=False, categorical_action_encoding=True)
    noop = env.transform[0]
    assert isinstance(noop, NoopResetEnv)
    noop.random = False
    env.set_seed(seed)
    obs, _ = ref.reset(seed=seed)
    td = env.reset()
    np.testing.assert_array_equal(td["pixels"].numpy(), obs)
    for action in [1, 2, 3, 0, 2, 2, 1, 3] * 3:
        obs, *_ = ref.step(action)
        td = _step(env, td, action)
        np.testing.assert_array_equal(td["next", "pixels"].numpy(), obs)
        td = env.step_mdp(td)
    env.close()
    ref.close()


def test_reward_sign_and_specs():
    env = make_atari_env(GAME, noop_max=2)
    check_env_specs(env, seed=0)
    assert env.full_observation_spec["end-of-life"].dtype == torch.bool
    assert env.full_observation_spec["lives"].dtype == torch.int64
    env.set_seed(0)
    torch.manual_seed(1)  # the random actions: with this seed random play scores twice
    data = env.rollout(150, break_when_any_done=False)
    assert set(data["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert data["next", "reward"].sum() > 0
    env.close()


def test_resize_area_matches_opencv():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (3, 1, 210, 160), dtype=np.uint8)
    out = Resize(84, 84, interpolation="area")._apply_transform(torch.from_numpy(img))
    for i in range(3):
        ref = cv2.resize(img[i, 0], (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(out[i, 0].numpy(), ref)


def test_stop_on_done_refuses_a_batch():
    with pytest.raises(ValueError, match="stop_on_done needs an env with one member"):
        CountingEnv(max_steps=5, batch_size=[2]).append_transform(
            FrameSkipTransform(2, stop_on_done=True)
        )


def test_end_of_life_without_lives_is_an_error():
    with pytest.raises(AttributeError, match="no lives count"):
        CountingEnv(max_steps=5).append_transform(EndOfLifeTransform()).reset()


@pytest.mark.timeout(60)
def test_inside_parallel_env():
    make = functools.partial(make_atari_env, GAME, noop_max=0, categorical_action_encoding=True)
    env = ParallelEnv(2, make)
    try:
        env.set_seed(0)
        data = env.rollout(12, break_when_any_done=False)
        assert data["next", "pixels"].shape == (2, 12, 4, 84, 84)
        assert data["next", "pixels"].dtype == torch.uint8
        stacks = data["next", "pixels"]
        # each step's stack is the previous one shifted by one screen
        torch.testing.assert_close(stacks[:, 1:, :3], stacks[:, :-1, 1:])
        assert data["next", "lives"].shape == (2, 12)
        assert data["next", "lives"].min() >= 0 and data["next", "lives"].max() <= 5
        # the two workers play different games (seeded apart)
        assert not torch.equal(stacks[0], stacks[1])
    finally:
        env.close()


def test_stop_on_done_stops_at_the_episode_end():
    # CountingEnv ends at 7: TorchRL's repetition goes on to 9, stop_on_done stops at 7
    def run(stop: bool):
        env = CountingEnv(max_steps=7).append_transform(FrameSkipTransform(3, stop_on_done=stop))
        td = env.rollout(5)
        return td["next", "observation"].flatten().tolist(), td["next", "reward"].flatten().tolist()

    assert run(False) == ([3.0, 6.0, 9.0], [3.0, 3.0, 3.0])
    assert run(True) == ([3.0, 6.0, 7.0], [3.0, 3.0, 1.0])
