"""Off-policy presets (DQN, SAC, TD3, DDPG): tiny runs, buffer checkpoints and resume."""

from __future__ import annotations

import json

import pytest

from tdrl.train import load_config
from tdrl.train._checkpoint import latest_checkpoint
from tdrl.train._off_policy import OffPolicyTrainer
from tdrl.train.cli import main

TINY = {
    "dqn": [
        "frames=256",
        "num_envs=4",
        "collector.frames_per_batch=64",
        "collector.init_random_frames=64",
        "buffer.batch_size=16",
        "model.hidden=[16, 16]",
    ],
    "sac": [
        "frames=120",
        "collector.frames_per_batch=40",
        "collector.init_random_frames=40",
        "buffer.batch_size=16",
        "model.hidden=[16, 16]",
    ],
    "td3": [
        "frames=120",
        "collector.frames_per_batch=40",
        "collector.init_random_frames=40",
        "buffer.batch_size=16",
        "model.hidden=[16, 16]",
    ],
    "ddpg": [
        "frames=120",
        "collector.frames_per_batch=40",
        "collector.init_random_frames=40",
        "buffer.batch_size=16",
        "model.hidden=[16, 16]",
    ],
}


@pytest.mark.parametrize("preset", sorted(TINY))
def test_preset_runs_and_evaluates(tmp_path, preset, capsys):
    out = tmp_path / preset
    args = ["train", preset, "--quiet", "--out", str(out), "--set", "eval.episodes=2"]
    for item in TINY[preset]:
        args += ["--set", item]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == int(TINY[preset][0].split("=")[1])
    assert summary["final_eval_return"] is not None
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and (ckpt / "buffer").is_dir()
    main(["eval", str(out), "--episodes", "2"])
    assert "mean return over 2 episodes" in capsys.readouterr().out


def test_dqn_resume_restores_buffer_and_update_count(tmp_path):
    overrides = [
        *TINY["dqn"],
        "frames=512",
        "logging.checkpoint_every_frames=128",
        "eval.every_frames=0",
    ]
    cfg = load_config("dqn", overrides=overrides)
    out = tmp_path / "run"

    class Killed(Exception):
        pass

    first = OffPolicyTrainer(cfg, out, quiet=True)
    original = first._after_iteration

    def dying(batch, losses, frames):
        original(batch, losses, frames)
        if first.frames >= 256:
            raise Killed

    first._after_iteration = dying
    with pytest.raises(Killed):
        first.run()
    updates_at_kill = first._updates
    eps_at_kill = float(first.agent.exploration.eps)
    stored = len(first.buffer)
    resumed = OffPolicyTrainer(
        json.loads((out / "config.json").read_text()), out, quiet=True, resume=True
    )
    assert float(resumed.agent.exploration.eps) == cfg["exploration"]["eps_init"]
    resumed._restore()
    assert resumed.frames == 256 and len(resumed.buffer) == stored
    assert resumed._updates == updates_at_kill
    # the annealed exploration goes on from where it was, not from eps_init
    assert eps_at_kill < cfg["exploration"]["eps_init"]
    assert float(resumed.agent.exploration.eps) == pytest.approx(eps_at_kill)
    summary = OffPolicyTrainer(
        json.loads((out / "config.json").read_text()), out, quiet=True, resume=True
    ).run()
    assert summary["frames"] == 512
