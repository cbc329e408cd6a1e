"""The tdrl command line: presets, overrides, a tiny PPO/A2C run, eval and resume."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from tdrl.train import OnPolicyTrainer, apply_overrides, load_config, load_preset
from tdrl.train._checkpoint import latest_checkpoint
from tdrl.train.cli import build_parser, main


def test_help_lists_commands_and_options(capsys):
    with pytest.raises(SystemExit) as err:
        main(["--help"])
    assert err.value.code == 0
    out = capsys.readouterr().out
    assert "train" in out and "eval" in out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for flag in (
        "--env",
        "--frames",
        "--num-envs",
        "--seed",
        "--out",
        "--config",
        "--set",
        "--resume",
        "--device",
    ):
        assert flag in out


def test_overrides_parse_values_and_reject_typos():
    cfg = load_config("ppo", overrides=["optim.lr=0.5", "loss.normalize_advantage=false"])
    assert cfg["optim"]["lr"] == 0.5 and cfg["loss"]["normalize_advantage"] is False
    with pytest.raises(KeyError, match=r"unknown config key 'optim\.lrr'"):
        apply_overrides(cfg, ["optim.lrr=1"])
    with pytest.raises(ValueError, match="unknown preset"):
        load_preset("nope")
    assert build_parser().parse_args(["train"]).preset == "ppo"


def test_config_file_is_merged(tmp_path):
    path = tmp_path / "extra.toml"
    path.write_text("num_envs = 3\n[optim]\nlr = 0.01\n")
    cfg = load_config("a2c", str(path))
    assert cfg["num_envs"] == 3 and cfg["optim"]["lr"] == 0.01 and cfg["loss"]["gamma"] == 0.99


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("preset", ["ppo", "a2c"])
def test_tiny_run_writes_everything(tmp_path, preset, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            preset,
            "--frames",
            "512",
            "--num-envs",
            "4",
            "--quiet",
            "--out",
            str(out),
            "--set",
            "eval.every_frames=256",
            "--set",
            "eval.target_return=0",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] >= 512 and summary["algorithm"] == preset
    rows = _rows(out)
    assert [int(r["frames"]) for r in rows] == sorted(int(r["frames"]) for r in rows)
    assert any(r["eval_return"] for r in rows)
    assert (out / "learning_curve.png").stat().st_size > 0
    assert latest_checkpoint(out) is not None
    main(["eval", str(out), "--episodes", "2"])
    assert "mean return over 2 episodes" in capsys.readouterr().out


def test_resume_continues_counters_curves_and_optimizer(tmp_path):
    cfg = load_config(
        "ppo",
        overrides=[
            "frames=1024",
            "num_envs=4",
            "collector.frames_per_batch=128",
            "logging.checkpoint_every_frames=256",
            "eval.every_frames=0",
            "loss.epochs=2",
        ],
    )
    out = tmp_path / "run"

    class Killed(Exception):
        pass

    trainer = OnPolicyTrainer(cfg, out, quiet=True)
    original = trainer._after_iteration

    def dying(batch, losses, frames):
        original(batch, losses, frames)
        if trainer.frames >= 512:
            raise Killed

    trainer._after_iteration = dying
    with pytest.raises(Killed):
        trainer.run()
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "ckpt-000000512"
    step_at_ckpt = float(trainer.optimizer.state_dict()["state"][0]["step"])
    resumed = OnPolicyTrainer(
        json.loads((out / "config.json").read_text()), out, quiet=True, resume=True
    )
    summary = resumed.run()
    assert summary["frames"] == 1024 and summary["iterations"] == 8
    frames = [int(r["frames"]) for r in _rows(out)]
    assert frames == list(range(128, 1025, 128))
    assert float(resumed.optimizer.state_dict()["state"][0]["step"]) > step_at_ckpt
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["ckpt-000000768", "ckpt-000001024"]


def test_resume_without_checkpoint_raises(tmp_path):
    cfg = load_config("ppo", overrides=["frames=128"])
    with pytest.raises(FileNotFoundError, match="no checkpoint under"):
        OnPolicyTrainer(cfg, tmp_path, quiet=True, resume=True).run()


def test_eval_of_a_non_run_directory_fails_with_a_message(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_ppo_preset_learns_cartpole_quickly(tmp_path):
    torch.manual_seed(0)
    cfg = load_config("ppo", overrides=["frames=40960"])
    summary = OnPolicyTrainer(cfg, tmp_path, quiet=True).run()
    assert summary["best_eval_return"] >= 475


def test_gymnasium_env_option(tmp_path):
    out = tmp_path / "gym"
    assert (
        main(
            [
                "train",
                "ppo",
                "--env",
                "gym:CartPole-v1",
                "--frames",
                "256",
                "--num-envs",
                "2",
                "--quiet",
                "--out",
                str(out),
                "--set",
                "eval.episodes=2",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == "gym:CartPole-v1" and summary["frames"] == 256


def test_unknown_env_is_rejected(tmp_path):
    with pytest.raises(ValueError, match=r"unknown env \(got 'Nope'"):
        main(["train", "ppo", "--env", "Nope", "--out", str(tmp_path)])


def test_env_processes_must_divide_num_envs_and_exclude_ray(tmp_path):
    argv = ["train", "dqn", "--frames", "64", "--num-envs", "3", "--out", str(tmp_path)]
    with pytest.raises(ValueError, match="env_processes must be an int > 0 that divides num_envs"):
        main([*argv, "--quiet", "--set", "env_processes=2"])
    with pytest.raises(ValueError, match="env_processes must be 0 with Ray actors"):
        main(
            [*argv, "--num-envs", "2", "--set", "env_processes=2", "--ray", "--num-collectors", "1"]
        )


def test_env_processes_steps_the_envs_in_workers_and_closes_them(tmp_path):
    cfg = load_config(
        "dqn",
        overrides=[
            "frames=128",
            "num_envs=4",
            "env_processes=2",
            "collector.frames_per_batch=64",
            "collector.init_random_frames=64",
            "buffer.batch_size=16",
            "model.hidden=[16]",
            "eval.episodes=1",
        ],
    )
    from tdrl.envs import ParallelEnv
    from tdrl.train._off_policy import OffPolicyTrainer

    trainer = OffPolicyTrainer(cfg, tmp_path, quiet=True)
    assert isinstance(trainer.env, ParallelEnv) and trainer.env.batch_size == (2, 2)
    assert trainer.run()["frames"] == 128
    assert trainer.env.is_closed  # the worker processes it started are gone
