"""The long soak (10 minutes by default; ``--soak-minutes 240`` for hours): a DQN run with a
replay buffer, a ParallelEnv and a checkpoint every few seconds, watched for growth of RSS,
fds, threads, /dev/shm entries and checkpoint size (see ``soak.py``). Run it alone, niced::

    nice -n 19 .venv/bin/python -m pytest benchmarks/soak/test_soak_long.py \\
        --soak-minutes 60 --soak-out /tmp/soak -s

The short variant CI runs is ``tests/train/test_train_soak.py``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from soak import Bounds, run_soak


def test_soak(request: pytest.FixtureRequest) -> None:
    minutes = float(request.config.getoption("--soak-minutes"))
    out = request.config.getoption("--soak-out") or tempfile.mkdtemp(prefix="tdrl-soak-")
    result = run_soak(minutes * 60, out, every=10.0, bounds=Bounds())
    print(json.dumps(asdict(result), indent=2))
    assert result.passed, result.failures
