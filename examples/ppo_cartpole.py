"""PPO on the built-in batched CartPole, written out in full (no trainer class).

Run: python examples/ppo_cartpole.py --frames 50000
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector
from tdrl.envs import CartPoleEnv
from tdrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from tdrl.objectives import ClipPPOLoss
from tdrl.train import evaluate


def main(frames: int = 50_000, num_envs: int = 8, seed: int = 0) -> float:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    env = CartPoleEnv(batch_size=(num_envs,))
    env.set_seed(seed)

    # Policy: observation -> logits -> one-hot action; critic: observation -> state value.
    policy_net = MLP(
        in_features=4, out_features=2, num_cells=[64, 64], activation_class=torch.nn.Tanh
    )
    actor = ProbabilisticActor(
        TensorDictModule(policy_net, ["observation"], ["logits"]),
        ["logits"],
        distribution_class=OneHotCategorical,
        spec=env.action_spec,
        return_log_prob=True,  # PPO needs the log-prob of the collected actions
    )
    critic = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[64, 64]))

    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_coeff=0.0,
        critic_coeff=0.5,  # "l2" is the full squared error: 0.5 * MSE
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    loss.make_value_estimator("GAE", gamma=0.98, lmbda=0.8)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3, eps=1e-5)

    collector = Collector(env, actor, frames_per_batch=256, total_frames=frames)
    for i, batch in enumerate(collector):
        with torch.no_grad():
            loss.value_estimator(batch)  # writes "advantage" and "value_target"
        flat = batch.reshape(-1)
        for _ in range(10):  # epochs over the batch
            out = loss(flat[torch.randperm(flat.shape[0])])
            total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
            optim.zero_grad()
            total.backward()
            torch.nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
            optim.step()
        if i % 10 == 0:
            done = batch["next", "done"]
            print(
                f"frames {collector.frames:6d}  episodes ended {int(done.sum()):3d}  "
                f"loss {float(total.detach()):.3f}"
            )
    collector.shutdown()

    # Deterministic evaluation: every env member plays one full episode.
    returns = evaluate(CartPoleEnv(batch_size=(10,)), actor)
    mean_return = sum(returns) / len(returns)
    print(f"deterministic mean return over 10 episodes: {mean_return:.1f}")
    return mean_return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.frames, args.num_envs, args.seed)
