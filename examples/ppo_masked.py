"""PPO with action masking on the built-in MaskedActionEnv.

At every step the env shows a cue and a fresh set of legal actions (``"action_mask"``);
picking the cue earns 1, another legal action 0, an illegal one -1 and ends the episode. The
policy samples from a ``MaskedOneHotCategorical`` that reads the mask, so it never plays an
illegal action, and the ``ActionMask`` transform keeps the env's action spec in step with the
mask, so random actions (``env.rand_action``) are legal too.

Run: python examples/ppo_masked.py --frames 10000

Measured on 2 CPUs (one torch thread, seed 0, default settings): random legal actions score
about 6; after 10,000 frames the deterministic policy scores 16.0 (the best), in 4 s of CPU.
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector
from tdrl.envs import ActionMask, MaskedActionEnv, TransformedEnv
from tdrl.modules import MLP, MaskedOneHotCategorical, ProbabilisticActor, ValueOperator
from tdrl.objectives import ClipPPOLoss
from tdrl.train import evaluate

N_ACTIONS = 5
MAX_STEPS = 16  # episode length, so the best return is 16


def make_env(num_envs: int, seed: int) -> TransformedEnv:
    """The masked-action env with its mask mirrored into the action spec."""
    base = MaskedActionEnv(batch_size=(num_envs,), n_actions=N_ACTIONS, max_steps=MAX_STEPS)
    env = TransformedEnv(base, ActionMask())
    env.set_seed(seed)
    return env


def main(frames: int = 10_000, num_envs: int = 8, seed: int = 0) -> float:
    """Trains PPO for ``frames`` env frames and returns the deterministic mean return."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    env = make_env(num_envs, seed)

    # The network sees the cue only; the mask enters through the distribution, which gives
    # illegal actions probability 0 (for sampling, the mode and the log-probabilities).
    policy_net = MLP(in_features=N_ACTIONS, out_features=N_ACTIONS, num_cells=[64, 64])
    actor = ProbabilisticActor(
        TensorDictModule(policy_net, ["observation"], ["logits"]),
        {"logits": "logits", "mask": "action_mask"},
        distribution_class=MaskedOneHotCategorical,
        spec=env.action_spec,
        return_log_prob=True,  # PPO needs the log-prob of the collected actions
    )
    critic = ValueOperator(MLP(in_features=N_ACTIONS, out_features=1, num_cells=[64, 64]))

    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_coeff=0.01,
        critic_coeff=0.5,  # "l2" is the full squared error: 0.5 * MSE
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    loss.make_value_estimator("GAE", gamma=0.99, lmbda=0.95)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)

    collector = Collector(env, actor, frames_per_batch=num_envs * 64, total_frames=frames)
    for i, batch in enumerate(collector):
        with torch.no_grad():
            loss.value_estimator(batch)  # writes "advantage" and "value_target"
        flat = batch.reshape(-1)
        for _ in range(4):  # epochs, each over 4 shuffled minibatches
            for idx in torch.randperm(flat.shape[0]).chunk(4):
                out = loss(flat[idx])
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optim.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                optim.step()
        if i % 5 == 0:
            reward = batch["next", "reward"]
            print(
                f"frames {collector.frames:6d}  reward/step {float(reward.mean()):.3f}  "
                f"illegal actions {int((reward < 0).sum())}  "
                f"entropy {float(out['entropy']):.3f}"
            )
    collector.shutdown()

    # Deterministic evaluation: the most likely legal action, one episode per env member.
    returns = evaluate(make_env(10, seed + 1), actor)
    mean_return = sum(returns) / len(returns)
    print(f"deterministic mean return over 10 episodes: {mean_return:.1f} (best {MAX_STEPS})")
    return mean_return


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.frames, args.num_envs, args.seed)
