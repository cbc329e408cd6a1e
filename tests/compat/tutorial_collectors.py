"""Collectors and batched envs, the way TorchRL's collector / multi-env tutorials read.

A manual ``step_mdp`` loop, a ``SerialEnv`` of seeded workers, a ``Collector`` whose batches the
caller owns (``list(collector)`` keeps each one), and a ``MultiSyncCollector`` over two worker
processes with a ``RandomPolicy``.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

from typing import Any

import torch

from tdrl.collectors import Collector, MultiSyncCollector, RandomPolicy
from tdrl.envs import GymEnv, SerialEnv, step_mdp


def make_env() -> GymEnv:
    """A Pendulum env (module-level so worker processes can build it)."""
    return GymEnv("Pendulum-v1")


def main(budget: int = 100) -> dict[str, Any]:
    """Step by hand, collect from a serial env and from two processes.

    Args:
        budget: total frames for each collector.

    Returns:
        The manual trajectory, the serial env's first observations and the collected batches.
    """
    torch.manual_seed(0)
    env = make_env()
    env.set_seed(0)
    policy = RandomPolicy(env.action_spec)

    # A hand-written rollout: step, keep the step, move "next" to the root.
    td = env.reset()
    steps = []
    for _ in range(5):
        td = policy(td)
        td = env.step(td)
        steps.append(td.clone())
        td = step_mdp(td)
    manual = torch.stack(steps)

    serial = SerialEnv(2, make_env)
    serial.set_seed(0)
    serial_reset = serial.reset()
    serial_rollout = serial.rollout(3)
    serial.close()

    collector = Collector(make_env, policy, frames_per_batch=budget // 4, total_frames=budget)
    batches = list(collector)
    collector.shutdown()

    multi = MultiSyncCollector(
        [make_env, make_env], policy, frames_per_batch=budget // 2, total_frames=budget
    )
    multi_batches = []
    for data in multi:
        multi_batches.append(data)
    multi.shutdown()
    return {
        "manual": manual,
        "serial_reset": serial_reset,
        "serial_rollout": serial_rollout,
        "batches": batches,
        "multi_batches": multi_batches,
    }


if __name__ == "__main__":
    main()
