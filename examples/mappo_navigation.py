"""Multi-agent PPO (MAPPO) on the built-in MultiAgentNavigationEnv.

Each agent drives to its own goal and earns a reward for getting closer; an agent that
arrives is reset on its own (new start and goal) while the others carry on. Every entry of
an agent lives under ``"agents"`` with one row per agent: ``("agents", "observation")`` is
``[*B, n_agents, 4]``. One policy network is shared by all agents (it acts on each row);
the critic is centralised: it sees every agent's observation and gives one value per agent.
The loss and its value estimator read the nested keys set with ``set_keys``, so rewards,
done flags and advantages are per agent.

Run: python examples/mappo_navigation.py --frames 60000

Measured on 2 CPUs (one torch thread, default settings): the team return over an episode of
100 steps is about 1 for random actions and about 340 for a hand-written policy that drives
each agent straight to its goal; after 60,000 frames (world steps, 3 agents each) the deterministic policy scores 346
(seed 0) and 326 (seed 1), in about 14 s of CPU.
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.collectors import Collector
from tdrl.envs import MultiAgentNavigationEnv
from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal, ValueOperator
from tdrl.objectives import ClipPPOLoss
from tdrl.train import evaluate

N_AGENTS = 3
OBS = 4  # position and goal - position


class CentralCritic(nn.Module):
    """All agents' observations ``[*B, n, OBS]`` -> one value per agent ``[*B, n, 1]``."""

    def __init__(self, n_agents: int) -> None:
        super().__init__()
        self.net = MLP(in_features=n_agents * OBS, out_features=n_agents, num_cells=[128, 128])

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation.flatten(-2)).unsqueeze(-1)


def main(frames: int = 60_000, num_envs: int = 16, seed: int = 0) -> float:
    """Trains MAPPO for ``frames`` frames; returns the deterministic mean team return."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    env = MultiAgentNavigationEnv(batch_size=(num_envs,), n_agents=N_AGENTS)
    env.set_seed(seed)

    # Shared policy: the MLP acts on the last dim, so each agent's row gets its own action.
    policy_net = nn.Sequential(
        MLP(in_features=OBS, out_features=4, num_cells=[64, 64]), NormalParamExtractor()
    )
    actor = ProbabilisticActor(
        TensorDictModule(
            policy_net, [("agents", "observation")], [("agents", "loc"), ("agents", "scale")]
        ),
        {"loc": ("agents", "loc"), "scale": ("agents", "scale")},
        distribution_class=TanhNormal,  # bounds from the spec: velocities in [-1, 1]
        spec=env.action_spec,
        out_keys=[("agents", "action")],
        return_log_prob=True,  # written at ("agents", "action_log_prob")
    )
    critic = ValueOperator(
        CentralCritic(N_AGENTS),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "state_value")],
    )

    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_bonus=False,
        critic_coeff=0.5,  # "l2" is the full squared error: 0.5 * MSE
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    # Every key the loss and its estimator use is per agent; GAE then runs per agent.
    loss.set_keys(
        action=("agents", "action"),
        sample_log_prob=("agents", "action_log_prob"),
        value=("agents", "state_value"),
        advantage=("agents", "advantage"),
        value_target=("agents", "value_target"),
        reward=("agents", "reward"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss.make_value_estimator("GAE", gamma=0.95, lmbda=0.9)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)

    collector = Collector(env, actor, frames_per_batch=num_envs * 64, total_frames=frames)
    for i, batch in enumerate(collector):
        with torch.no_grad():
            loss.value_estimator(batch)  # ("agents", "advantage"), ("agents", "value_target")
        flat = batch.reshape(-1)
        for _ in range(10):  # epochs, each over 4 shuffled minibatches
            for idx in torch.randperm(flat.shape[0]).chunk(4):
                out = loss(flat[idx])
                total = out["loss_objective"] + out["loss_critic"]
                optim.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optim.step()
        if i % 10 == 0:
            reward = batch["next", "agents", "reward"]
            arrived = batch["next", "agents", "terminated"]
            print(
                f"frames {collector.frames:6d}  reward/agent/step {float(reward.mean()):.3f}  "
                f"goals reached {int(arrived.sum()):4d}"
            )
    collector.shutdown()

    # Deterministic evaluation: the team return (all agents) of one episode per env member.
    eval_env = MultiAgentNavigationEnv(batch_size=(10,), n_agents=N_AGENTS)
    eval_env.set_seed(seed + 1)
    returns = evaluate(eval_env, actor)
    mean_return = sum(returns) / len(returns)
    print(f"deterministic mean team return over 10 episodes: {mean_return:.1f}")
    return mean_return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=60_000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.frames, args.num_envs, args.seed)
