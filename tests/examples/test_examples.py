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


def test_every_example_is_tested():
    tested = {"random_rollout", "ppo_cartpole"}
    names = {p.stem for p in EXAMPLES.glob("*.py")}
    assert names <= tested, f"examples without a test: {sorted(names - tested)}"
