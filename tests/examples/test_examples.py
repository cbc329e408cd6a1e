"""Every example script runs end to end with a tiny budget."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_rollout(capsys):
    _load("random_rollout").main()
    assert "episodes finished" in capsys.readouterr().out


def test_ppo_cartpole():
    result = _load("ppo_cartpole").main(frames=512, num_envs=4)
    assert math.isfinite(result) and result >= 1.0


def test_sac_pendulum():
    result = _load("sac_pendulum").main(
        frames=256, num_envs=2, init_random_frames=128, batch_size=32
    )
    # Pendulum costs at most pi^2 + 0.1 * 8^2 + 0.001 * 2^2 per step, for 200 steps.
    assert math.isfinite(result) and -200 * 16.3 <= result <= 0.0


def test_dqn_prioritized():
    result = _load("dqn_prioritized").main(
        frames=512, num_envs=4, init_random_frames=128, batch_size=16
    )
    assert math.isfinite(result) and 1.0 <= result <= 500.0


def test_ppo_lstm():
    result = _load("ppo_lstm").main(frames=256, num_envs=4, steps=16)
    assert math.isfinite(result) and 1.0 <= result <= 500.0


def test_ppo_masked():
    module = _load("ppo_masked")
    result = module.main(frames=512, num_envs=4)
    # A masked policy never plays an illegal action (reward -1, episode over): every
    # evaluation episode runs to the horizon with rewards in {0, 1}.
    assert 0.0 <= result <= module.MAX_STEPS


def test_mappo_navigation():
    module = _load("mappo_navigation")
    result = module.main(frames=256, num_envs=4)
    # An agent moves at most 0.1 * sqrt(2) per step: its reward is within 10 * that of 0,
    # plus 1 on arrival, for each of the 100 steps of the episode.
    step = 10 * 0.1 * math.sqrt(2)
    assert -module.N_AGENTS * 100 * step <= result <= module.N_AGENTS * 100 * (step + 1)


def test_mappo_vmas():
    module = _load("mappo_vmas")
    result = module.main(frames=80, num_envs=4, max_steps=10)
    # VMAS's navigation rewards each agent with the team's change of distance to the goals
    # (4 agents moving at most about 0.2 per step each: 0.8) and -1 per collision of an agent.
    assert math.isfinite(result) and -10 * (0.8 + 4) <= result <= 10 * 0.8 + 0.01


def test_qmix_vmas():
    module = _load("qmix_vmas")
    result = module.main(frames=160, num_envs=4, max_steps=10, init_random_frames=80, batch_size=16)
    # as for mappo_vmas: team shaping at most about 0.8 per step, -1 per collision of an agent
    assert math.isfinite(result) and -10 * (0.8 + 4) <= result <= 10 * 0.8 + 0.01


def test_every_example_is_tested():
    tested = {
        "random_rollout",
        "ppo_cartpole",
        "sac_pendulum",
        "dqn_prioritized",
        "ppo_lstm",
        "ppo_masked",
        "mappo_navigation",
        "mappo_vmas",
        "qmix_vmas",
    }
    names = {p.stem for p in EXAMPLES.glob("*.py")}
    assert names <= tested, f"examples without a test: {sorted(names - tested)}"
