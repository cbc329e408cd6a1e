"""QMIX on VMAS's navigation scenario with discrete actions, written out by hand.

Four agents must reach their own goals without bumping into each other; each picks one of 9
discrete moves. ``VmasEnv`` stacks the agents of the group: ``("agents", "observation")`` is
``[num_envs, 4, 18]``, ``("agents", "action")`` ``[num_envs, 4]`` action indices and
``("agents", "reward")`` ``[num_envs, 4, 1]`` (VMAS gives every agent the team's shaping
reward). The episode ends for every agent at once, at the root ``"done"``.

QMIX: each agent picks the action of highest value from a Q-network shared by the agents
(``QValueActor`` around a ``MultiAgentMLP``) and explores e-greedily; a ``QMixer`` mixes the
values of the chosen actions into the team's value. VMAS has no global state, so the mixer is
conditioned on the stacked observations of the agents (with PettingZoo, build the env with
``return_state=True`` and read ``"state"`` instead). ``QMixerLoss`` learns the mixed value from
the team reward (the mean of the agents' rewards, ``[*B, 1]``), with target networks, on
transitions sampled from a replay buffer.

Run: python examples/qmix_vmas.py --frames 60000

Measured on 2 shared CPUs (one torch thread, seed 0): the deterministic return (the sum over
the 100-step episode of the agents' mean reward; about 4 when every agent reaches its goal)
goes from -14.2 (untrained: every agent drives off in one direction) to 4.0 after 60,000
frames, in a few minutes.
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from tdrl.collectors import Collector
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import VmasEnv
from tdrl.modules import EGreedyModule, MultiAgentMLP, QMixer, QValueActor
from tdrl.objectives import QMixerLoss, SoftUpdate
from tdrl.train import evaluate_returns

GROUP = "agents"


def make_env(num_envs: int, seed: int, max_steps: int) -> VmasEnv:
    return VmasEnv(
        "navigation",
        num_envs=num_envs,
        continuous_actions=False,
        max_steps=max_steps,
        seed=seed,
    )


def main(
    frames: int = 60_000,
    num_envs: int = 32,
    seed: int = 0,
    max_steps: int = 100,
    init_random_frames: int = 3_200,
    batch_size: int = 256,
) -> float:
    """Trains QMIX for ``frames`` frames; returns the deterministic mean return."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    env = make_env(num_envs, seed, max_steps)
    spec = env.full_action_spec_unbatched[GROUP, "action"]  # Categorical(9), shape [4]
    n_agents, n_actions = spec.shape[-1], spec.n
    n_obs = env.observation_spec[GROUP, "observation"].shape[-1]

    qnet = QValueActor(
        MultiAgentMLP(
            n_obs,
            n_actions,
            n_agents,
            centralized=False,
            share_params=True,
            num_cells=[64, 64],
            activation_class=nn.ReLU,
        ),
        [(GROUP, "observation")],
        action_space="categorical",
        action_value_key=(GROUP, "action_value"),
        action_key=(GROUP, "action"),
        chosen_action_value_key=(GROUP, "chosen_action_value"),
    )
    greedy = EGreedyModule(
        spec, 1.0, eps_end=0.05, annealing_num_steps=frames // 2, action_key=(GROUP, "action")
    )
    mixer = TensorDictModule(  # the state: every agent's observation, [*B, n_agents, n_obs]
        QMixer(state_shape=(n_agents, n_obs), mixing_embed_dim=32, n_agents=n_agents),
        [(GROUP, "chosen_action_value"), (GROUP, "observation")],
        ["chosen_action_value"],
    )
    loss = QMixerLoss(qnet, mixer, action_space=spec)
    loss.set_keys(
        action_value=(GROUP, "action_value"),
        local_value=(GROUP, "chosen_action_value"),
        action=(GROUP, "action"),
        reward="team_reward",  # the team's reward, [*B, 1], added to each transition below
    )
    loss.make_value_estimator("TD0", gamma=0.9)  # dense shaping reward: a short horizon
    target = SoftUpdate(loss, tau=0.005)
    optim = torch.optim.Adam(loss.parameters(), lr=5e-4)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000), batch_size=batch_size)
    keys = list(env.fake_tensordict().keys(True, True))

    collector = Collector(
        env,
        TensorDictSequential(qnet, greedy),
        frames_per_batch=num_envs * 10,
        total_frames=frames,
        init_random_frames=init_random_frames,
    )
    for i, batch in enumerate(collector):
        flat = batch.reshape(-1).select(*keys)  # the env's entries (random batches lack others)
        flat["next", "team_reward"] = flat["next", GROUP, "reward"].mean(-2)
        buffer.extend(flat)
        greedy.step(flat.numel())
        if collector.frames >= init_random_frames:
            for _ in range(max(flat.numel() // 20, 1)):  # 0.05 gradient steps per frame
                out = loss(buffer.sample())
                optim.zero_grad()
                out["loss"].backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 10.0)
                optim.step()
                target.step()
        if i % 50 == 0:
            print(f"frames {collector.frames:6d}  epsilon {float(greedy.eps):.2f}")
    collector.shutdown()

    # One deterministic episode per world: the sum over the episode of the agents' mean reward.
    returns = evaluate_returns(
        make_env(10, seed + 1, max_steps), qnet, {GROUP: (GROUP, "reward")}, reduce="mean"
    )[GROUP]
    mean_return = sum(returns) / len(returns)
    print(f"deterministic mean return over 10 episodes: {mean_return:.2f}")
    return mean_return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=60_000)
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.frames, args.num_envs, args.seed)
