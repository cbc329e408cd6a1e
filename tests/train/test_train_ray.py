"""``tdrl train --ray [ADDRESS] --num-collectors N``: the trainers collect with Ray actors; the
run directory, metrics, checkpoints and resume are as without Ray."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from tdrl.train import OnPolicyTrainer, load_config
from tdrl.train._checkpoint import latest_checkpoint
from tdrl.train._ray_collect import RaySettings
from tdrl.train.cli import main

pytestmark = pytest.mark.timeout(240)


def _frames(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return [int(row["frames"]) for row in csv.DictReader(f)]


def test_an_interrupted_ray_run_resumes_and_its_frames_continue(ray_session, tmp_path):
    cfg = load_config(
        "ppo",
        overrides=[
            "frames=512",
            "num_envs=4",
            "collector.frames_per_batch=128",
            "logging.checkpoint_every_frames=256",
            "eval.every_frames=256",
            "eval.episodes=2",
            "loss.epochs=2",
        ],
    )
    out = tmp_path / "run"

    class Killed(Exception):
        pass

    trainer = OnPolicyTrainer(cfg, out, quiet=True, ray=RaySettings(ray_session.address, 2))
    original = trainer._after_iteration

    def dying(batch, losses, frames):
        assert batch.batch_size == (2, 2, 32)  # [collectors, envs per collector, T]
        original(batch, losses, frames)
        if trainer.frames >= 256:
            raise Killed

    trainer._after_iteration = dying
    with pytest.raises(Killed):
        trainer.run()
    assert latest_checkpoint(out).name == "ckpt-000000256"
    argv = ["train", "--resume", str(out), "--quiet", "--ray", ray_session.address]
    assert main([*argv, "--num-collectors", "1"]) == 0
    assert _frames(out) == [128, 256, 384, 512]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 512 and summary["iterations"] == 4
    assert (out / "learning_curve.png").stat().st_size > 0
    assert latest_checkpoint(out).name == "ckpt-000000512"


def test_an_off_policy_preset_trains_with_ray_actors(ray_session, tmp_path):
    out = tmp_path / "dqn"
    argv = ["train", "dqn", "--frames", "256", "--num-envs", "2", "--quiet", "--out", str(out)]
    overrides = [
        "collector.frames_per_batch=128",
        "collector.init_random_frames=128",
        "eval.episodes=2",
        "eval.every_frames=0",
        "loss.updates_per_frame=0.05",
    ]
    argv += [x for o in overrides for x in ("--set", o)]
    assert main([*argv, "--ray", "--num-collectors", "2"]) == 0  # Ray is up: it is used
    assert _frames(out) == [128, 256]
    assert json.loads((out / "summary.json").read_text())["frames"] == 256
    assert (latest_checkpoint(out) / "buffer").is_dir()


def test_ray_flags_are_checked(tmp_path):
    with pytest.raises(ValueError, match="--num-collectors needs --ray"):
        main(["train", "ppo", "--num-collectors", "2", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--ray-timeout needs --ray"):
        main(["train", "ppo", "--ray-timeout", "5", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--ray-timeout must be a finite number of seconds > 0"):
        main(["train", "ppo", "--ray", "--ray-timeout", "0", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--num-collectors must be an int >= 1"):
        main(["train", "ppo", "--ray", "--num-collectors", "0", "--out", str(tmp_path)])
    argv = ["train", "ppo", "--num-envs", "3", "--frames", "96", "--out", str(tmp_path)]
    with pytest.raises(ValueError, match="num_envs must be a multiple of --num-collectors"):
        main([*argv, "--quiet", "--ray", "--num-collectors", "2"])
    with pytest.raises(ValueError, match="actors run on CPUs"):
        main([*argv, "--num-envs", "4", "--device", "meta", "--ray", "--num-collectors", "2"])


def test_the_command_starts_a_local_ray_without_an_address(tmp_path):
    out = tmp_path / "local"
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    argv = ["train", "a2c", "--frames", "64", "--num-envs", "2", "--quiet", "--out", str(out)]
    argv += ["--set", "collector.frames_per_batch=64", "--set", "eval.episodes=1"]
    run = subprocess.run(
        [sys.executable, "-m", "tdrl", *argv, "--ray", "--num-collectors", "1"],
        capture_output=True,
        text=True,
        timeout=220,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Started a local Ray instance" in run.stderr
    assert json.loads((out / "summary.json").read_text())["frames"] == 64
