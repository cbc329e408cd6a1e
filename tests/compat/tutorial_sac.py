"""SAC on Pendulum, the way TorchRL's SAC example reads.

A ``TanhNormal`` actor, two Q-value networks (``ValueOperator`` on observation and action), a
``SACLoss`` with its default TD(0) estimator, ``SoftUpdate`` targets, a ``Collector`` with
random initial frames and a ``TensorDictReplayBuffer`` on a ``LazyTensorStorage``.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import DoubleToFloat, GymEnv, TransformedEnv
from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal, ValueOperator
from tdrl.objectives import SACLoss, SoftUpdate


def main(budget: int = 300) -> dict[str, Any]:
    """Train SAC for ``budget`` frames.

    Args:
        budget: total frames collected (batches of 50).

    Returns:
        The loss values per update, the buffer length and the last sample.
    """
    torch.manual_seed(0)
    env = TransformedEnv(GymEnv("Pendulum-v1"), DoubleToFloat())
    env.set_seed(0)
    action_dim = env.action_spec.shape[-1]

    actor_net = torch.nn.Sequential(
        MLP(num_cells=[64, 64], out_features=2 * action_dim, activation_class=torch.nn.ReLU),
        NormalParamExtractor(scale_mapping="biased_softplus_1.0"),
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        spec=env.action_spec,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": env.action_spec.space.low,
            "high": env.action_spec.space.high,
            "tanh_loc": False,
        },
        return_log_prob=False,
    )
    qvalue = ValueOperator(
        MLP(num_cells=[64, 64], out_features=1, activation_class=torch.nn.ReLU),
        in_keys=["observation", "action"],
    )
    td = env.reset()
    actor(td)
    qvalue(td)

    loss_module = SACLoss(
        actor_network=actor,
        qvalue_network=qvalue,
        num_qvalue_nets=2,
        loss_function="l2",
        delay_actor=False,
        delay_qvalue=True,
        alpha_init=1.0,
    )
    loss_module.make_value_estimator(gamma=0.99)
    target_net_updater = SoftUpdate(loss_module, eps=0.995)
    optimizer_actor = torch.optim.Adam(loss_module.actor_network_params.values(True, True), lr=3e-4)
    optimizer_critic = torch.optim.Adam(
        loss_module.qvalue_network_params.values(True, True), lr=3e-4
    )
    optimizer_alpha = torch.optim.Adam([loss_module.log_alpha], lr=3e-4)

    collector = Collector(
        env, actor, frames_per_batch=50, total_frames=budget, init_random_frames=100
    )
    replay_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(budget), batch_size=32)
    losses = []
    for data in collector:
        replay_buffer.extend(data.reshape(-1))
        if len(replay_buffer) < 100:
            continue
        for _ in range(2):
            sample = replay_buffer.sample()
            loss_td = loss_module(sample)
            optimizer_critic.zero_grad()
            optimizer_actor.zero_grad()
            optimizer_alpha.zero_grad()
            (loss_td["loss_actor"] + loss_td["loss_qvalue"] + loss_td["loss_alpha"]).backward()
            optimizer_critic.step()
            optimizer_actor.step()
            optimizer_alpha.step()
            target_net_updater.step()
            losses.append({k: v.item() for k, v in loss_td.items() if k.startswith("loss")})
    collector.shutdown()
    return {
        "losses": losses,
        "buffer_len": len(replay_buffer),
        "sample": sample,
        "alpha": loss_module.log_alpha.exp().item(),
    }


if __name__ == "__main__":
    main()
