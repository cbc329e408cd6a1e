"""Recurrent DQN, the way TorchRL's "Recurrent DQN" tutorial reads (on CartPole's state vector).

An ``LSTMModule`` sits between an embedding MLP and the Q-value head; its primer
(``make_tensordict_primer``) is appended to the env so that reset gives zero hidden states.
The collector runs the step-by-step policy with an ``EGreedyModule``; the ``DQNLoss`` (with a
delayed target network on a lazy MLP) runs the LSTM over whole sequences, and ``SoftUpdate``
moves the target. ``set_recurrent_mode`` switches the LSTM to sequence mode for an explicit
forward pass over a sampled batch of trajectories.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict.nn import TensorDictModule as Mod
from tensordict.nn import TensorDictSequential as Seq

from tdrl.collectors import Collector
from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.envs import (
    Compose,
    DoubleToFloat,
    GymEnv,
    InitTracker,
    StepCounter,
    TransformedEnv,
)
from tdrl.modules import MLP, EGreedyModule, LSTMModule, QValueModule, set_recurrent_mode
from tdrl.objectives import DQNLoss, SoftUpdate


def main(budget: int = 200) -> dict[str, Any]:
    """Collect ``budget`` frames and train the recurrent Q-network on sampled trajectories.

    Args:
        budget: total frames collected.

    Returns:
        The env's reset, the last collected batch, the last sample and the loss values.
    """
    torch.manual_seed(0)
    env = TransformedEnv(
        GymEnv("CartPole-v1"),
        Compose(StepCounter(), InitTracker(), DoubleToFloat()),
    )
    env.set_seed(0)

    feature = Mod(
        MLP(out_features=32, num_cells=[32], activation_class=torch.nn.Tanh),
        in_keys=["observation"],
        out_keys=["embed"],
    )
    n_cells = feature(env.reset())["embed"].shape[-1]
    lstm = LSTMModule(input_size=n_cells, hidden_size=32, in_key="embed", out_key="embed")
    env.append_transform(lstm.make_tensordict_primer())
    mlp = MLP(out_features=2, num_cells=[32])
    mlp[-1].bias.data.fill_(0.0)
    mlp = Mod(mlp, in_keys=["embed"], out_keys=["action_value"])
    qval = QValueModule(spec=env.action_spec)

    policy = Seq(feature, lstm, mlp, qval)
    policy(env.reset())
    exploration_module = EGreedyModule(
        annealing_num_steps=budget, spec=env.action_spec, eps_init=0.2
    )
    stoch_policy = Seq(policy, exploration_module)

    loss_fn = DQNLoss(policy, action_space=env.action_spec, delay_value=True)
    updater = SoftUpdate(loss_fn, eps=0.95)
    optim = torch.optim.Adam(policy.parameters(), lr=3e-3)

    frames_per_batch = 50
    collector = Collector(env, stoch_policy, frames_per_batch=frames_per_batch, total_frames=budget)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
    losses = []
    for data in collector:
        rb.extend(data.unsqueeze(0).to_tensordict().cpu())
        for _ in range(4):
            sample = rb.sample()
            loss_vals = loss_fn(sample)
            loss_vals["loss"].backward()
            optim.step()
            optim.zero_grad()
            losses.append(loss_vals["loss"].item())
        exploration_module.step(data.numel())
        updater.step()
    collector.shutdown()

    with set_recurrent_mode(True), torch.no_grad():
        sequence_out = policy(sample.clone())
    return {
        "reset": env.reset(),
        "data": data,
        "sample": sample,
        "sequence_out": sequence_out,
        "losses": losses,
        "eps": exploration_module.eps.item(),
    }


if __name__ == "__main__":
    main()
