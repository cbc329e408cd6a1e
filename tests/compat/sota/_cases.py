"""The SOTA-style scripts and the tiny budgets they run with (in CI and when recorded).

Each case names a script folder, the script module, its YAML config, the entry function
(``main``, or ``train`` for the multi-agent scripts) and the hydra-style overrides that shrink
the run. ``torchrl_results.json`` holds what each case logged on torchrl 0.14.1 with exactly
these overrides (``python tests/compat/sota/_swap.py record``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    folder: str
    script: str
    config: str
    entry: str
    overrides: tuple[str, ...]


CASES: dict[str, Case] = {
    "dqn": Case(
        "dqn",
        "dqn",
        "config.yaml",
        "main",
        (
            "collector.total_frames=200",
            "collector.init_random_frames=50",
            "collector.annealing_frames=100",
            "buffer.batch_size=16",
            "logger.test_interval=100",
            "logger.num_test_episodes=1",
            "loss.hard_update_freq=1000",
        ),
    ),
    "ppo": Case(
        "ppo",
        "ppo",
        "config.yaml",
        "main",
        (
            "collector.frames_per_batch=256",
            "collector.total_frames=512",
            "loss.mini_batch_size=64",
            "loss.ppo_epochs=2",
            "logger.test_interval=256",
            "logger.num_test_episodes=1",
        ),
    ),
    "a2c": Case(
        "a2c",
        "a2c",
        "config.yaml",
        "main",
        (
            "collector.frames_per_batch=128",
            "collector.total_frames=384",
            "loss.mini_batch_size=32",
            "logger.test_interval=256",
            "logger.num_test_episodes=1",
        ),
    ),
    "sac": Case(
        "sac",
        "sac",
        "config.yaml",
        "main",
        (
            "env.max_episode_steps=50",
            "collector.total_frames=300",
            "collector.init_random_frames=100",
            "collector.frames_per_batch=100",
            "collector.env_per_collector=2",
            "optim.utd_ratio=0.1",
            "optim.batch_size=64",
            "network.hidden_sizes=[64,64]",
            "logger.eval_iter=200",
        ),
    ),
}
