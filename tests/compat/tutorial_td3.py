"""TD3 on Pendulum with Gaussian exploration, the way TorchRL's TD3 example reads.

A deterministic actor (``MLP`` then ``TanhModule`` bounded by the action spec), an
``AdditiveGaussianModule`` for exploration (annealed with ``.step``), a ``TD3Loss`` with two
Q-networks, target-policy smoothing and delayed actor updates through ``loss.value_loss`` /
``loss.actor_loss``, and ``SoftUpdate`` targets.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule as Mod
from tensordict.nn import TensorDictSequential as Seq

from tdrl.collectors import Collector
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import DoubleToFloat, GymEnv, TransformedEnv
from tdrl.modules import MLP, AdditiveGaussianModule, TanhModule, ValueOperator
from tdrl.objectives import SoftUpdate, TD3Loss


def main(budget: int = 300) -> dict[str, Any]:
    """Train TD3 for ``budget`` frames.

    Args:
        budget: total frames collected (batches of 50).

    Returns:
        Q and actor losses, the exploration policy's actions and the exploration sigma.
    """
    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("Pendulum-v1"), DoubleToFloat())
    env.set_seed(0)
    action_dim = env.action_spec.shape[-1]

    actor = Seq(
        Mod(
            MLP(num_cells=[64, 64], out_features=action_dim),
            in_keys=["observation"],
            out_keys=["param"],
        ),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=env.action_spec),
    )
    qvalue = ValueOperator(
        MLP(num_cells=[64, 64], out_features=1), in_keys=["observation", "action"]
    )
    actor(env.reset())
    qvalue(actor(env.reset()))
    exploration = AdditiveGaussianModule(
        spec=env.action_spec, sigma_init=1.0, sigma_end=0.1, annealing_num_steps=budget, std=0.1
    )
    exploration_policy = Seq(actor, exploration)

    loss_module = TD3Loss(
        actor_network=actor,
        qvalue_network=qvalue,
        num_qvalue_nets=2,
        loss_function="l2",
        delay_actor=True,
        delay_qvalue=True,
        action_spec=env.action_spec,
        policy_noise=0.2,
        noise_clip=0.5,
    )
    loss_module.make_value_estimator(gamma=0.99)
    target_net_updater = SoftUpdate(loss_module, eps=0.995)
    optimizer_actor = torch.optim.Adam(loss_module.actor_network_params.values(True, True), lr=3e-4)
    optimizer_critic = torch.optim.Adam(
        loss_module.qvalue_network_params.values(True, True), lr=3e-4
    )

    collector = Collector(env, exploration_policy, frames_per_batch=50, total_frames=budget)
    replay_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(budget), batch_size=32)
    q_losses, actor_losses, actions = [], [], []
    update_counter = 0
    for data in collector:
        actions.append(data["action"])
        exploration.step(data.numel())
        replay_buffer.extend(data.reshape(-1))
        for _ in range(2):
            update_counter += 1
            sample = replay_buffer.sample()
            q_loss, _ = loss_module.value_loss(sample)
            optimizer_critic.zero_grad()
            q_loss.backward()
            optimizer_critic.step()
            q_losses.append(q_loss.item())
            if update_counter % 2 == 0:
                actor_loss, _ = loss_module.actor_loss(sample)
                optimizer_actor.zero_grad()
                actor_loss.backward()
                optimizer_actor.step()
                actor_losses.append(actor_loss.item())
                target_net_updater.step()
    collector.shutdown()
    return {
        "q_losses": q_losses,
        "actor_losses": actor_losses,
        "actions": torch.cat(actions),
        "sigma": float(exploration.sigma),
        "full_loss": loss_module(sample),
    }


if __name__ == "__main__":
    main()
