"""The MuJoCo presets (sac_mujoco, td3_mujoco, ppo_mujoco) at tiny budgets, and the observation
normalisation of ppo_mujoco (running statistics, frozen at evaluation, kept across --resume)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tdrl.train import load_config
from tdrl.train._builders import make_env
from tdrl.train._normalize import ObsNormalizer
from tdrl.train.cli import make_trainer

_TINY_OFF = [
    "frames=48",
    "collector.init_random_frames=16",
    "buffer.batch_size=8",
    "model.hidden=[16]",
    "eval.every_frames=32",
    "eval.episodes=1",
    "eval.max_steps=10",
    "logging.checkpoint_every_frames=0",
]


def test_presets_hold_the_reference_values() -> None:
    sac, td3, ppo = (load_config(p) for p in ("sac_mujoco", "td3_mujoco", "ppo_mujoco"))
    for cfg in (sac, td3, ppo):
        assert cfg["env"] == "gym:HalfCheetah-v5" and cfg["num_envs"] == 1
    # RL-Zoo sac.yml / td3.yml MuJoCo entries and SB3's defaults
    assert (sac["optim"]["lr"], sac["buffer"]["batch_size"]) == (3e-4, 256)
    assert sac["buffer"]["capacity"] == 1_000_000 and sac["target"]["tau"] == 0.005
    assert sac["collector"]["init_random_frames"] == 10_000 and sac["model"]["hidden"] == [256, 256]
    assert (td3["optim"]["lr"], td3["model"]["hidden"]) == (1e-3, [400, 300])
    assert (td3["loss"]["policy_noise"], td3["loss"]["noise_clip"]) == (0.2, 0.5)
    assert td3["loss"]["policy_delay"] == 2 and td3["exploration"]["sigma_init"] == 0.1
    # SB3's PPO defaults with VecNormalize (RL-Zoo's MuJoCo set-up), CleanRL's values
    assert ppo["collector"]["frames_per_batch"] == 2048 and ppo["loss"]["minibatch_size"] == 64
    assert (ppo["loss"]["epochs"], ppo["optim"]["lr"], ppo["loss"]["lmbda"]) == (10, 3e-4, 0.95)
    assert ppo["normalize"] == {"observation": True, "decay": 1.0, "eps": 1e-8, "clip": 10.0}


def test_gym_mujoco_observations_are_float32() -> None:
    env = make_env("gym:HalfCheetah-v5", 1, seed=0)
    assert env.observation_spec["observation"].dtype == torch.float32
    assert env.rollout(2)["next", "observation"].dtype == torch.float32


@pytest.mark.parametrize("preset", ["sac_mujoco", "td3_mujoco"])
def test_off_policy_mujoco_preset_trains(preset: str, tmp_path) -> None:
    cfg = load_config(preset, overrides=_TINY_OFF)
    summary = make_trainer(cfg, tmp_path, quiet=True).run()
    assert summary["frames"] == 48 and summary["env"] == "gym:HalfCheetah-v5"
    assert math.isfinite(summary["final_eval_return"])
    assert (tmp_path / "metrics.csv").read_text().count("\n") == 49  # header + a row per frame
    assert (tmp_path / "learning_curve.png").exists()


def _ppo_cfg(frames: int) -> dict:
    return load_config(
        "ppo_mujoco",
        overrides=[
            f"frames={frames}",
            "collector.frames_per_batch=32",
            "loss.minibatch_size=16",
            "loss.epochs=1",
            "model.hidden=[16]",
            "eval.every_frames=32",
            "eval.episodes=1",
            "eval.max_steps=10",
            "logging.checkpoint_every_frames=32",
        ],
    )


def test_ppo_mujoco_normalises_observations_and_resumes(tmp_path) -> None:
    trainer = make_trainer(_ppo_cfg(64), tmp_path, quiet=True)
    summary = trainer.run()
    assert summary["frames"] == 64
    norm = trainer.normalizer.train_norm
    # 1 row at the reset, then one per step: the statistics saw every training observation
    assert norm.count_0.tolist() == [65.0] * 17
    # the evaluation envs use the training statistics, frozen: evaluating changes nothing
    count = norm.count_0.clone()
    trainer._evaluate()
    assert torch.equal(norm.count_0, count)
    saved = trainer.normalizer.state.observation_count.clone()
    assert saved.tolist() == [65.0] * 17
    config = json.loads((tmp_path / "config.json").read_text())
    config["frames"] = 96
    resumed = make_trainer(config, tmp_path, quiet=True, resume=True)
    assert resumed.run()["frames"] == 96
    # restored, then 32 more steps and the fresh episode's reset row (gym envs restart)
    assert resumed.normalizer.train_norm.count_0.tolist() == [65.0 + 33.0] * 17


def test_normalizer_clips_and_freezes_for_evaluation() -> None:
    norm = ObsNormalizer.from_config({"normalize": {"observation": True, "clip": 0.5}})
    assert norm is not None
    env = norm.wrap_train(make_env("Pendulum", 4, seed=0))
    train = env.rollout(20)
    assert float(train["next", "observation"].abs().max()) <= 0.5
    eval_env = norm.wrap_eval(make_env("Pendulum", 2, seed=1))
    assert norm.wrap_eval(eval_env.base_env) is eval_env  # one wrapper, refreshed
    before = norm.train_norm.count_0.clone()
    eval_env.rollout(5)
    assert torch.equal(norm.train_norm.count_0, before)
    assert ObsNormalizer.from_config({"normalize": {"observation": False}}) is None
    with pytest.raises(ValueError, match="normalize"):
        ObsNormalizer.from_config({"normalize": {"observation": True, "scale": 2}})
