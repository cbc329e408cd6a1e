"""Roll out the built-in CartPole with a random policy and print the episode returns."""

from __future__ import annotations

import torch

from tdrl.envs import CartPoleEnv


def main() -> None:
    torch.manual_seed(0)
    env = CartPoleEnv(batch_size=(8,))
    env.set_seed(0)
    data = env.rollout(500, break_when_any_done=False)
    done = data["next", "done"].squeeze(-1)
    reward = data["next", "reward"].squeeze(-1)
    returns: list[float] = []
    for i in range(done.shape[0]):
        total = 0.0
        for r, d in zip(reward[i].tolist(), done[i].tolist()):
            total += r
            if d:
                returns.append(total)
                total = 0.0
    print(
        f"{len(returns)} episodes finished; mean return {sum(returns) / max(len(returns), 1):.1f}"
    )
    print("returns:", [round(r) for r in returns[:20]])


if __name__ == "__main__":
    main()
