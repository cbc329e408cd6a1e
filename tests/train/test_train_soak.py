"""The short soak CI runs (the long one, and the real RSS check: ``benchmarks/soak/``): 20 s
of DQN training with a replay buffer (full within the warm-up), a ParallelEnv and a checkpoint
every ~3 s, sampled every second. Over the samples after the warm-up (40%), open fds, threads,
``/dev/shm`` entries and the size of the kept checkpoints must not grow, and RSS must not grow
by more than 150 MB. 20 s cannot tell a slope of RSS from the allocator's steps and from
matplotlib's caches (filled by the learning curve drawn at each checkpoint: ~0.3 MB per
drawing for its first hundred, which the long soak leaves in its warm-up), so only a gross leak
fails here; the long soak judges the slope. The run ends with SIGTERM, which must stop it
cleanly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)  # + the start-up of the trainer and its workers

_SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak" / "soak.py"


def _soak_module():
    spec = importlib.util.spec_from_file_location("tdrl_soak", _SOAK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_short_soak_shows_no_growth(tmp_path):
    soak = _soak_module()
    bounds = soak.Bounds(max_rss_mb_per_h=float("inf"), warmup=0.4)  # the slope: see above
    result = soak.run_soak(
        20.0, tmp_path, every=1.0, checkpoint_frames=512, capacity=768, bounds=bounds
    )
    assert result.samples >= 15 and result.checkpoints >= 3, result
    assert result.exit_code == 0
    assert result.passed, result.failures
    assert result.rss_mb_end - result.rss_mb_start < 150.0, result


def test_the_judge_fails_each_kind_of_growth():
    soak = _soak_module()
    rows = [
        {
            "t": float(t),
            "rss_mb": 500.0,
            "fds": 80,
            "threads": 9,
            "shm": 17,
            "ckpt_mb": 0.6,
            "frames": 256 * t,
            "checkpoints": t // 2,
        }
        for t in range(40)
    ]
    assert soak.judge(rows, soak.Bounds(), 0).passed
    growths = {"fds": 1, "threads": 1, "shm": 1, "ckpt_mb": 0.05, "rss_mb": 1}
    named = {"fds": "fds", "threads": "threads", "shm": "shm", "ckpt_mb": "checkpoints"}
    for key, step in growths.items():
        grown = [{**r, key: r[key] + step * r["t"]} for r in rows]  # linear growth
        result = soak.judge(grown, soak.Bounds(), 0)
        assert [f.split()[0] for f in result.failures] == [named.get(key, "RSS")], result
    assert not soak.judge(rows, soak.Bounds(), 124).passed  # not stopped cleanly
