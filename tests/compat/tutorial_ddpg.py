"""DDPG on Pendulum with Ornstein-Uhlenbeck exploration, the way TorchRL's DDPG tutorial reads.

The OU process needs ``InitTracker`` (it resets its noise where ``"is_init"`` is set); the
``DDPGLoss`` has delayed actor and value targets, updated by ``SoftUpdate``.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule as Mod
from tensordict.nn import TensorDictSequential as Seq

from tdrl.collectors import Collector
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import Compose, DoubleToFloat, GymEnv, InitTracker, TransformedEnv
from tdrl.modules import MLP, OrnsteinUhlenbeckProcessModule, TanhModule, ValueOperator
from tdrl.objectives import DDPGLoss, SoftUpdate


def main(budget: int = 300) -> dict[str, Any]:
    """Train DDPG for ``budget`` frames.

    Args:
        budget: total frames collected (batches of 50).

    Returns:
        Actor/value losses, the collected actions (with OU noise) and the last batch.
    """
    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("Pendulum-v1"), Compose(InitTracker(), DoubleToFloat()))
    env.set_seed(0)

    actor = Seq(
        Mod(MLP(num_cells=[64, 64], out_features=1), in_keys=["observation"], out_keys=["param"]),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=env.action_spec),
    )
    value = ValueOperator(
        MLP(num_cells=[64, 64], out_features=1), in_keys=["observation", "action"]
    )
    value(actor(env.reset()))
    ou = OrnsteinUhlenbeckProcessModule(spec=env.action_spec, annealing_num_steps=budget)
    exploration_policy = Seq(actor, ou)

    loss_module = DDPGLoss(
        actor_network=actor,
        value_network=value,
        loss_function="l2",
        delay_actor=True,
        delay_value=True,
    )
    loss_module.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss_module, tau=0.01)
    optimizer_actor = torch.optim.Adam(loss_module.actor_network_params.values(True, True), lr=1e-4)
    optimizer_value = torch.optim.Adam(loss_module.value_network_params.values(True, True), lr=1e-3)

    collector = Collector(env, exploration_policy, frames_per_batch=50, total_frames=budget)
    replay_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(budget), batch_size=32)
    losses, actions = [], []
    for data in collector:
        actions.append(data["action"])
        ou.step(data.numel())
        replay_buffer.extend(data.reshape(-1))
        sample = replay_buffer.sample()
        loss_vals = loss_module(sample)
        optimizer_value.zero_grad()
        optimizer_actor.zero_grad()
        (loss_vals["loss_value"] + loss_vals["loss_actor"]).backward()
        optimizer_value.step()
        optimizer_actor.step()
        updater.step()
        losses.append({k: v.item() for k, v in loss_vals.items() if k.startswith("loss")})
    collector.shutdown()
    return {"losses": losses, "actions": torch.cat(actions), "data": data}


if __name__ == "__main__":
    main()
