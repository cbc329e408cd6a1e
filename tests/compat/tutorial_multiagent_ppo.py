"""Multi-agent PPO (MAPPO), the way TorchRL's multi-agent PPO tutorial reads.

TorchRL's tutorial uses a VMAS navigation scenario; here tdrl's built-in
``MultiAgentNavigationEnv`` plays that part (entries under ``"agents"``). A decentralised,
parameter-shared ``MultiAgentMLP`` policy feeds a ``TanhNormal`` ``ProbabilisticActor`` with
nested keys; a centralised ``MultiAgentMLP`` critic; ``ClipPPOLoss`` with ``set_keys`` for the
nested reward/action/value/done keys, a GAE estimator built with ``make_value_estimator``; a
``RewardSum`` transform tracks per-agent episode rewards.

Checked against torchrl 0.14.1 with only ``tdrl`` -> ``torchrl`` in the imports and, since TorchRL
has no ``MultiAgentNavigationEnv``, a stand-in TorchRL ``EnvBase`` with the same specs.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule
from tensordict.nn.distributions import NormalParamExtractor

from tdrl.collectors import Collector
from tdrl.data.replay_buffers import ReplayBuffer
from tdrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from tdrl.data.replay_buffers.storages import LazyTensorStorage
from tdrl.envs import MultiAgentNavigationEnv, RewardSum, TransformedEnv
from tdrl.envs.utils import check_env_specs
from tdrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
from tdrl.objectives import ClipPPOLoss, ValueEstimators


def main(budget: int = 600) -> dict[str, Any]:
    """Train MAPPO for ``budget`` frames over 4 parallel worlds of 3 agents.

    Args:
        budget: total frames collected (batches of ``budget // 2``, a multiple of 4).

    Returns:
        The training logs, the last batch and the last loss values.
    """
    torch.manual_seed(0)
    num_envs = 4
    frames_per_batch = budget // 2
    minibatch_size = frames_per_batch // 4
    num_epochs = 2
    max_grad_norm = 1.0

    env = MultiAgentNavigationEnv(batch_size=[num_envs], n_agents=3, max_steps=50)
    env = TransformedEnv(
        env, RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")])
    )
    check_env_specs(env)
    n_obs = env.observation_spec["agents", "observation"].shape[-1]

    policy_net = torch.nn.Sequential(
        MultiAgentMLP(
            n_agent_inputs=n_obs,
            n_agent_outputs=2 * env.full_action_spec_unbatched[env.action_key].shape[-1],
            n_agents=env.n_agents,
            centralized=False,
            share_params=True,
            depth=2,
            num_cells=64,
            activation_class=torch.nn.Tanh,
        ),
        NormalParamExtractor(),
    )
    policy_module = TensorDictModule(
        policy_net,
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "loc"), ("agents", "scale")],
    )
    policy = ProbabilisticActor(
        module=policy_module,
        spec=env.full_action_spec_unbatched,
        in_keys=[("agents", "loc"), ("agents", "scale")],
        out_keys=[env.action_key],
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": env.full_action_spec_unbatched[env.action_key].space.low,
            "high": env.full_action_spec_unbatched[env.action_key].space.high,
        },
        return_log_prob=True,
    )
    critic_net = MultiAgentMLP(
        n_agent_inputs=n_obs,
        n_agent_outputs=1,
        n_agents=env.n_agents,
        centralized=True,
        share_params=True,
        depth=2,
        num_cells=64,
        activation_class=torch.nn.Tanh,
    )
    critic = TensorDictModule(
        module=critic_net, in_keys=[("agents", "observation")], out_keys=[("agents", "state_value")]
    )
    policy(env.reset())
    critic(env.reset())

    collector = Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=budget)
    replay_buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=minibatch_size,
    )
    loss_module = ClipPPOLoss(
        actor_network=policy,
        critic_network=critic,
        clip_epsilon=0.2,
        entropy_coeff=1e-4,
        normalize_advantage=False,
    )
    loss_module.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.9)
    gae = loss_module.value_estimator
    optim = torch.optim.Adam(loss_module.parameters(), 3e-4)

    logs: dict[str, list[float]] = {"loss": [], "reward": []}
    for tensordict_data in collector:
        with torch.no_grad():
            gae(
                tensordict_data,
                params=loss_module.critic_network_params,
                target_params=loss_module.target_critic_network_params,
            )
        replay_buffer.extend(tensordict_data.reshape(-1))
        for _ in range(num_epochs):
            for _ in range(frames_per_batch // minibatch_size // num_envs):
                subdata = replay_buffer.sample()
                loss_vals = loss_module(subdata)
                loss_value = (
                    loss_vals["loss_objective"]
                    + loss_vals["loss_critic"]
                    + loss_vals["loss_entropy"]
                )
                loss_value.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), max_grad_norm)
                optim.step()
                optim.zero_grad()
                logs["loss"].append(loss_value.item())
        collector.update_policy_weights_()
        logs["reward"].append(tensordict_data["next", "agents", "reward"].mean().item())
    collector.shutdown()
    return {"logs": logs, "data": tensordict_data, "loss_vals": loss_vals}


if __name__ == "__main__":
    main()
