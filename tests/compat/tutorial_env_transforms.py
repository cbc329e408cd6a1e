"""Environments and transforms, written the way TorchRL's "getting started with envs" tutorial reads.

A Gym env is wrapped in a ``TransformedEnv`` with a ``Compose`` of transforms, the observation
normaliser's statistics are estimated from random steps, the specs are checked and a rollout is
taken. A discrete env (CartPole) shows the one-hot action spec TorchRL builds for ``Discrete``.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

from typing import Any

import torch

from tdrl.envs import (
    Compose,
    DoubleToFloat,
    GymEnv,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)


def main(budget: int = 200) -> dict[str, Any]:
    """Build, normalise, check and roll out a transformed Pendulum; roll out CartPole.

    Args:
        budget: number of random steps for the normaliser's statistics and rollout length.

    Returns:
        The env, its rollout, the normaliser's loc/scale and CartPole's action spec and rollout.
    """
    torch.manual_seed(0)
    base_env = GymEnv("Pendulum-v1")
    env = TransformedEnv(
        base_env,
        Compose(
            ObservationNorm(in_keys=["observation"]),
            DoubleToFloat(),
            StepCounter(max_steps=budget),
            RewardSum(),
        ),
    )
    # Statistics from random steps, reduced over the time dimension.
    env.transform[0].init_stats(num_iter=budget, reduce_dim=0, cat_dim=0)
    check_env_specs(env)
    env.set_seed(0)
    rollout = env.rollout(budget)
    print(rollout)

    cartpole = GymEnv("CartPole-v1")
    cartpole.set_seed(0)
    cartpole_rollout = cartpole.rollout(5)
    return {
        "env": env,
        "rollout": rollout,
        "loc": env.transform[0].loc,
        "scale": env.transform[0].scale,
        "cartpole_action_spec": cartpole.action_spec,
        "cartpole_rollout": cartpole_rollout,
    }


if __name__ == "__main__":
    main()
