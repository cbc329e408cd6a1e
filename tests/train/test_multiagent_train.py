"""The multi-agent presets end to end: run directory, per-group columns, checkpoints, resume."""

from __future__ import annotations

import csv
import importlib.util
import json

import pytest

from tdrl.train import load_config
from tdrl.train._checkpoint import latest_checkpoint
from tdrl.train.cli import main, make_trainer

TINY = [
    "num_envs=2",
    "frames=256",
    "collector.frames_per_batch=64",
    "eval.every_frames=128",
    "eval.episodes=2",
    "logging.checkpoint_every_frames=128",
    "env_options.max_steps=16",
    "model.hidden=[16]",
]
PPO_TINY = ["loss.epochs=1", "loss.minibatch_size=64"]
QMIX_TINY = ["collector.init_random_frames=64", "buffer.batch_size=16", "model.mixing_embed_dim=8"]

# Every preset on every env family it supports (qmix needs discrete actions: no built-in).
RUNS = [
    ("mappo", "Navigation", {"agents": 3}),
    ("mappo", "vmas:navigation", {"agents": 4}),
    ("mappo", "pettingzoo:simple_spread_v3", {"agent": 3}),
    ("ippo", "Navigation", {"agents": 3}),
    ("ippo", "vmas:navigation", {"agents": 4}),
    ("ippo", "pettingzoo:simple_spread_v3", {"agent": 3}),
    ("qmix", "vmas:navigation", {"agents": 4}),
    ("qmix", "pettingzoo:simple_spread_v3", {"agent": 3}),
    ("qmix", "pettingzoo:simple_spread_v3+state", {"agent": 3}),  # a QMixer on "state"
    # several groups: one network (and loss) per group
    ("mappo", "pettingzoo:simple_adversary_v3", {"adversary": 1, "agent": 2}),
    ("qmix", "vmas:simple_tag", {"adversary": 3, "agent": 1}),
]


def _config(preset, env, extra=()):
    tiny = TINY + (QMIX_TINY if preset == "qmix" else PPO_TINY)
    if env.endswith("+state"):
        env, extra = env[: -len("+state")], [*extra, "env_options.return_state=true"]
    return load_config(preset, overrides=[f"env={json.dumps(env)}", *tiny, *extra])


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


@pytest.mark.parametrize(("preset", "env", "groups"), RUNS)
def test_preset_writes_a_run_with_per_group_returns(tmp_path, preset, env, groups):
    trainer = make_trainer(_config(preset, env), tmp_path, quiet=True)
    if env.endswith("+state"):
        assert "state" in trainer.group_losses["agent"].mixer_network.in_keys
        env = env[: -len("+state")]
    summary = trainer.run()
    assert summary["frames"] == 256 and summary["groups"] == groups
    for g in groups:
        assert isinstance(summary[f"final_eval_return/{g}"], float)
    # the scalar returns are the mean over the groups (the group's own with one group), of the
    # same episodes
    for name in ("final_eval_return", "recent_train_return"):
        per_group = [summary[f"{name}/{g}"] for g in groups]
        if None not in per_group:
            assert summary[name] == pytest.approx(sum(per_group) / len(per_group)), name
    columns, rows = _rows(tmp_path)
    for r in rows:
        if r["train_return"]:
            per_group = [float(r[f"train_return/{g}"]) for g in groups]
            mean = sum(per_group) / len(per_group)  # of values metrics.csv rounds
            assert float(r["train_return"]) == pytest.approx(mean, rel=1e-4, abs=1e-4)
    assert [int(r["frames"]) for r in rows] == [64, 128, 192, 256]
    for g in groups:
        assert any(r[f"train_return/{g}"] for r in rows)
        assert [bool(r[f"eval_return/{g}"]) for r in rows] == [False, True, False, True]
    loss = "loss" if preset == "qmix" else "loss_objective"
    assert all(r[loss] for r in rows)
    if len(groups) > 1:
        assert {f"{loss}/{g}" for g in groups} <= set(columns)
    assert json.loads((tmp_path / "config.json").read_text())["env"] == env
    assert (tmp_path / "learning_curve.png").stat().st_size > 0
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == ["ckpt-000000128", "ckpt-000000256"]


class Killed(Exception):
    pass


@pytest.mark.parametrize(
    ("preset", "env"), [("mappo", "Navigation"), ("qmix", "pettingzoo:simple_adversary_v3")]
)
def test_resume_continues_frames_columns_and_buffer(tmp_path, preset, env):
    extra = ["frames=384"]
    trainer = make_trainer(_config(preset, env, extra), tmp_path, quiet=True)
    original = trainer._after_iteration

    def dying(batch, losses, frames):
        original(batch, losses, frames)
        if trainer.frames >= 192:
            raise Killed

    trainer._after_iteration = dying
    with pytest.raises(Killed):
        trainer.run()
    assert latest_checkpoint(tmp_path).name == "ckpt-000000128"
    columns, _ = _rows(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    resumed = make_trainer(config, tmp_path, quiet=True, resume=True)
    at_start = {}
    train = resumed._train

    def record():
        if preset == "qmix":
            at_start["stored"] = len(resumed.buffer)
            at_start["eps"] = float(next(iter(resumed.exploration.values())).eps)
        train()

    resumed._train = record
    summary = resumed.run()
    if preset == "qmix":  # the transitions stored up to the checkpoint, the annealed epsilon
        assert at_start["stored"] == 128 and at_start["eps"] < 1.0
    assert summary["frames"] == 384
    columns2, rows = _rows(tmp_path)
    assert [int(r["frames"]) for r in rows] == list(range(64, 385, 64))
    assert columns2 == columns


def test_cli_trains_and_evaluates_a_multiagent_run(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "mappo", "--env", "Navigation", "--quiet", "--out", str(out)]
    for item in TINY + PPO_TINY:
        args += ["--set", item]
    assert main(args) == 0
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "mean return over 2 episodes" in capsys.readouterr().out


def test_qmix_refuses_continuous_actions(tmp_path):
    with pytest.raises(ValueError, match="continuous actions only"):
        make_trainer(_config("qmix", "Navigation"), tmp_path, quiet=True)
    cfg = _config("qmix", "vmas:navigation", ["env_options.continuous_actions=true"])
    with pytest.raises(ValueError, match="group 'agents' has continuous actions"):
        make_trainer(cfg, tmp_path, quiet=True)


def test_single_agent_env_is_refused(tmp_path):
    cfg = _config("mappo", "CartPole")
    cfg.pop("env_options")
    with pytest.raises(ValueError, match=r"not one entry per agent group.*ppo, a2c, dqn"):
        make_trainer(cfg, tmp_path, quiet=True)


def test_env_options_reach_the_env_and_are_checked(tmp_path):
    cfg = _config("mappo", "Navigation", ["env_options.n_agents=2"])
    trainer = make_trainer(cfg, tmp_path, quiet=True)
    assert trainer.env.n_agents == 2 and trainer.env.max_steps == 16
    with pytest.raises(ValueError, match="continuous actions only"):
        make_trainer(
            _config("mappo", "Navigation", ["env_options.continuous_actions=false"]), tmp_path
        )
    single = load_config("ppo", overrides=["frames=64"])
    single["env_options"] = {"n": 1}
    with pytest.raises(ValueError, match="takes no env_options"):
        make_trainer(single, tmp_path)


def test_missing_extra_is_named(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vmas" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install tdrl\[vmas\]"):
        make_trainer(_config("mappo", "vmas:navigation"), tmp_path, quiet=True)
