"""GymEnv registers gymnasium's ALE/ namespace itself (no import of ale_py needed first)."""

from __future__ import annotations

import subprocess
import sys


def test_gym_env_builds_an_atari_game_without_importing_ale_py_first() -> None:
    code = (
        "import sys\n"
        "from tdrl.envs import GymEnv\n"
        "assert 'ale_py' not in sys.modules\n"
        "env = GymEnv('ALE/Pong-v5', categorical_action_encoding=True)\n"
        "print(tuple(env.reset()['observation'].shape))\n"
        "env.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(210, 160, 3)"
