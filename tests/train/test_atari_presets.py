"""The Atari presets (dqn_atari, ppo_atari) at tiny budgets: the reference values, the envs, the
networks, the DQN buffer's lean uint8 storage and --resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("ale_py")

from tdrl.envs import ParallelEnv
from tdrl.train import load_config
from tdrl.train._atari import restack_next_pixels
from tdrl.train._builders import make_env
from tdrl.train.cli import make_trainer

_ATARI = {"preprocessing": "atari", "noop_max": 30, "frame_stack": 4}
_TINY = [
    "eval.every_frames=32",
    "eval.episodes=1",
    "eval.max_steps=16",
    "logging.checkpoint_every_frames=32",
]


def test_presets_hold_the_reference_values() -> None:
    dqn, ppo = load_config("dqn_atari"), load_config("ppo_atari")
    for cfg in (dqn, ppo):
        assert cfg["env"] == "gym:ALE/Breakout-v5" and cfg["model"]["network"] == "nature_cnn"
        assert cfg["env_options"]["preprocessing"] == "atari" and cfg["env_processes"] == -1
        assert cfg["env_options"]["frame_stack"] == 4 and cfg["loss"]["gamma"] == 0.99
    # CleanRL dqn_atari.py
    assert (dqn["optim"]["lr"], dqn["buffer"]["batch_size"], dqn["num_envs"]) == (1e-4, 32, 1)
    assert dqn["collector"] == {"frames_per_batch": 4, "init_random_frames": 80_000}
    assert dqn["loss"]["updates_per_frame"] == 0.25 and dqn["target"]["hard_update_interval"] == 250
    assert dqn["exploration"] == {"eps_init": 1.0, "eps_end": 0.01, "annealing_frames": 1_000_000}
    # CleanRL ppo_atari.py
    assert (ppo["num_envs"], ppo["collector"]["frames_per_batch"]) == (8, 1024)
    assert (ppo["loss"]["minibatch_size"], ppo["loss"]["epochs"]) == (256, 4)
    assert (ppo["optim"]["lr"], ppo["optim"]["anneal_lr"], ppo["optim"]["max_grad_norm"]) == (
        2.5e-4,
        True,
        0.5,
    )
    lc = ppo["loss"]
    assert (lc["clip_epsilon"], lc["entropy_coef"], lc["critic_coef"], lc["lmbda"]) == (
        0.1,
        0.01,
        0.5,
        0.95,
    )


def test_atari_env_options_build_the_preprocessed_game() -> None:
    env = make_env("gym:ALE/Pong-v5", 2, seed=0, options=_ATARI)
    spec = env.observation_spec["pixels"]
    assert env.batch_size == (2,) and spec.shape == (2, 4, 84, 84) and spec.dtype == torch.uint8
    assert "end-of-life" in env.observation_spec.keys()
    env.close()
    with pytest.raises(ValueError, match="frame_stak"):
        make_env("gym:ALE/Pong-v5", 1, seed=0, options={"preprocessing": "atari", "frame_stak": 2})
    with pytest.raises(ValueError, match="gymnasium ALE id"):
        make_env("CartPole", 1, seed=0, options={"preprocessing": "atari"})


def test_next_stacks_are_rebuilt_from_the_stack_and_the_newest_screen() -> None:
    env = make_env("gym:ALE/Breakout-v5", 1, seed=0, options=_ATARI)
    data = env.rollout(40, break_when_any_done=False)[0]
    env.close()
    full = data["next", "pixels"].clone()
    assert bool((full != data["pixels"]).any())  # the screens change over the rollout
    lean = data.select("pixels", ("next", "pixels")).clone()
    lean["next", "pixels"] = full[:, -1:]
    torch.testing.assert_close(restack_next_pixels(lean)["next", "pixels"], full)


def _dqn_cfg(frames: int) -> dict:
    return load_config(
        "dqn_atari",
        overrides=[
            f"frames={frames}",
            "env_processes=0",
            "collector.init_random_frames=32",
            "buffer.capacity=128",
            "buffer.batch_size=4",
            *_TINY,
        ],
    )


def test_dqn_atari_stores_lean_uint8_screens_and_resumes(tmp_path) -> None:
    trainer = make_trainer(_dqn_cfg(64), tmp_path, quiet=True)
    assert trainer.agent.loss.tensor_keys.terminated == "end-of-life"
    summary = trainer.run()
    assert summary["frames"] == 64 and math.isfinite(summary["final_eval_return"])
    stored = trainer.buffer.storage.get(torch.arange(64))
    assert stored["pixels"].shape == (64, 4, 84, 84) and stored["pixels"].dtype == torch.uint8
    assert stored["next", "pixels"].shape == (64, 1, 84, 84)
    # within an episode the next stack is the following step's stack
    sample = trainer.buffer.sample()
    assert sample["next", "pixels"].shape == (4, 4, 84, 84)
    assert (tmp_path / "learning_curve.png").exists()
    config = json.loads((tmp_path / "config.json").read_text())
    config["frames"] = 96
    resumed = make_trainer(config, tmp_path, quiet=True, resume=True)
    assert resumed.run()["frames"] == 96
    assert len(resumed.buffer) == 96  # the checkpointed buffer came back, then 32 more
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 1 + 96 // 4


def test_ppo_atari_trains_in_worker_processes_with_a_shared_trunk(tmp_path) -> None:
    cfg = load_config(
        "ppo_atari",
        overrides=[
            "frames=64",
            "num_envs=1",
            "collector.frames_per_batch=32",
            "loss.minibatch_size=16",
            "loss.epochs=1",
            *_TINY,
        ],
    )
    trainer = make_trainer(cfg, tmp_path, quiet=True)
    assert isinstance(trainer.env, ParallelEnv) and trainer.env.batch_size == (1, 1)
    actor, critic = trainer.loss.actor_network, trainer.loss.critic_network
    assert actor[0] is critic[0]  # one trunk: its parameters once in the optimizer
    trunk = sum(p.numel() for p in actor[0].parameters())
    total = sum(p.numel() for g in trainer.optimizer.param_groups for p in g["params"])
    assert total == trunk + (512 * 4 + 4) + (512 + 1)
    assert trainer.loss.tensor_keys.done == "end-of-life"
    before = [p.detach().clone() for p in actor[0].parameters()]
    summary = trainer.run()
    assert summary["frames"] == 64 and math.isfinite(summary["final_eval_return"])
    assert all(not torch.equal(a, p) for a, p in zip(before, actor[0].parameters()))


def test_nature_dqn_network_and_its_dueling_variant() -> None:
    from tdrl.train._atari import make_atari_qnet

    env = make_env("gym:ALE/Pong-v5", 1, seed=0, options=_ATARI)
    pixels = env.reset()["pixels"]
    env.close()
    net = make_atari_qnet(env, {})
    # Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1 on 4x84x84 -> 64x7x7, 512, 6 actions
    convs = (32 * 4 * 64 + 32) + (64 * 32 * 16 + 64) + (64 * 64 * 9 + 64)
    assert sum(p.numel() for p in net.parameters()) == convs + (3136 * 512 + 512) + (512 * 6 + 6)
    assert net(pixels).shape == (1, 6)
    dueling = make_atari_qnet(env, {"dueling": True})
    heads = (3136 * 512 + 512) * 2 + (512 * 6 + 6) + (512 + 1)
    assert sum(p.numel() for p in dueling.parameters()) == convs + heads
    assert dueling(pixels).shape == (1, 6)
