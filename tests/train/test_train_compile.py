"""tdrl train --compile: the flag reaches the trainers (their loss is compiled), is kept for
--resume, and its [compile] table is checked."""

from __future__ import annotations

import json

import pytest
import torch

from tdrl.train import load_config
from tdrl.train._compile import compile_settings, policy_compile
from tdrl.train.cli import main, make_trainer

GRAPHS: list[int] = []


@torch._dynamo.register_backend(name="tdrl_test_counting")
def _counting_backend(gm, example_inputs):
    """Runs each graph as traced and counts it: the tests see that the loss was compiled."""
    GRAPHS.append(len(gm.graph.nodes))
    return gm.forward


TINY = ["--quiet", "--set", "eval.every_frames=0", "--set", "eval.episodes=2"]


def test_compile_flag_compiles_the_off_policy_loss_and_resume_keeps_it(tmp_path):
    out = tmp_path / "run"
    GRAPHS.clear()
    argv = ["train", "dqn", "--compile", "--frames", "128", "--out", str(out), *TINY]
    argv += ["--set", "compile.backend=tdrl_test_counting", "--set", "model.hidden=[8]"]
    argv += ["--set", "collector.init_random_frames=64", "--set", "collector.frames_per_batch=64"]
    assert main(argv) == 0
    assert GRAPHS  # the loss went through torch.compile
    config = json.loads((out / "config.json").read_text())
    assert config["compile"]["enabled"] is True
    assert json.loads((out / "summary.json").read_text())["frames"] == 128
    GRAPHS.clear()  # resume (a longer budget): the saved config compiles again
    config["frames"] = 192
    trainer = make_trainer(config, out, quiet=True, resume=True)
    assert trainer.run()["frames"] == 192 and GRAPHS


def test_compile_flag_compiles_the_on_policy_loss(tmp_path):
    GRAPHS.clear()
    argv = ["train", "a2c", "--compile", "--frames", "64", "--num-envs", "2"]
    argv += ["--out", str(tmp_path / "run"), *TINY, "--set", "compile.backend=tdrl_test_counting"]
    argv += ["--set", "collector.frames_per_batch=32", "--set", "compile.policy=false"]
    assert main(argv) == 0
    assert GRAPHS


def test_compile_settings_read_the_table():
    config = load_config("sac", overrides=["compile.enabled=true", "compile.mode=max-autotune"])
    assert compile_settings(config) == {"backend": "inductor", "mode": "max-autotune"}
    assert policy_compile(config) == compile_settings(config)  # the SAC preset compiles it
    assert compile_settings(load_config("sac")) is None  # not enabled: nothing compiled
    assert policy_compile(load_config("sac")) is None
    dqn = load_config("dqn", overrides=["compile.enabled=true"])
    assert policy_compile(dqn) == compile_settings(dqn)  # it pays for DQN's policy
    td3 = load_config("td3", overrides=["compile.enabled=true"])
    assert compile_settings(td3) is not None and policy_compile(td3) is None  # not for TD3's


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"enabled": True, "backend": "nope"}, "unknown torch.compile backend"),
        ({"enabled": True, "mode": "fastest"}, "unknown torch.compile mode"),
        ({"enabled": True, "modes": "default"}, r"bad \[compile\] table"),
    ],
)
def test_bad_compile_settings_are_refused_before_training(tmp_path, table, match):
    config = load_config("dqn")
    config["compile"] = table
    with pytest.raises(ValueError, match=match):
        make_trainer(config, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.parametrize(
    ("preset", "env"),
    [("mappo", "pettingzoo:simple_adversary_v3"), ("qmix", "vmas:simple_tag")],
)
def test_compile_flag_compiles_every_group_loss_of_the_multi_agent_presets(tmp_path, preset, env):
    """Envs of two agent groups: each group's loss is compiled, and its graphs run."""
    GRAPHS.clear()
    overrides = [
        f"env={json.dumps(env)}",
        "compile.enabled=true",
        "compile.backend=tdrl_test_counting",
        "num_envs=2",
        "frames=64",
        "collector.frames_per_batch=32",
        "eval.every_frames=0",
        "eval.episodes=2",
        "env_options.max_steps=8",
        "model.hidden=[16]",
    ]
    if preset == "qmix":
        overrides += ["collector.init_random_frames=32", "buffer.batch_size=16"]
    else:
        overrides += ["loss.epochs=1", "loss.minibatch_size=32"]
    trainer = make_trainer(load_config(preset, overrides=overrides), tmp_path / "run", quiet=True)
    assert len(trainer.group_losses) == 2
    trainer.run()
    for name, loss in trainer.group_losses.items():
        assert loss._compiled_call_impl is not None, name  # nn.Module.compile ran on it
    assert GRAPHS


def test_a_trainer_that_does_not_compile_refuses_the_flag(tmp_path):
    from tdrl.train._trainer import Trainer

    class Plain(Trainer):
        pass

    config = load_config("ppo", overrides=["compile.enabled=true", "num_envs=2"])
    with pytest.raises(ValueError, match="Plain does not compile its update"):
        Plain(config, tmp_path / "run", quiet=True)
