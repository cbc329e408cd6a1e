"""The ``make_*`` helpers of the A2C CartPole script (TorchRL's ``a2c/utils_mujoco.py``
layout; the policy head is a ``OneHotCategorical`` over the env's one-hot actions)."""

from __future__ import annotations

import numpy as np
import torch.nn
import torch.optim
from tensordict.nn import TensorDictModule

from tdrl.envs import (
    ClipTransform,
    ExplorationType,
    RewardSum,
    StepCounter,
    TransformedEnv,
    VecNorm,
)
from tdrl.envs.libs.gym import GymEnv
from tdrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator
from tdrl.record import VideoRecorder

# ====================================================================
# Environment utils
# --------------------------------------------------------------------


def make_env(env_name="CartPole-v1", device="cpu", from_pixels=False, pixels_only=False):
    env = GymEnv(env_name, device=device, from_pixels=from_pixels, pixels_only=pixels_only)
    env = TransformedEnv(env)
    env.append_transform(RewardSum())
    env.append_transform(StepCounter())
    env.append_transform(VecNorm(in_keys=["observation"]))
    env.append_transform(ClipTransform(in_keys=["observation"], low=-10, high=10))
    return env


# ====================================================================
# Model utils
# --------------------------------------------------------------------


def make_ppo_models_state(proof_environment, device, *, compile: bool = False):
    # Input and output sizes
    input_shape = proof_environment.observation_spec["observation"].shape
    num_outputs = proof_environment.action_spec_unbatched.shape[-1]

    # Policy: logits of a one-hot categorical
    policy_mlp = MLP(
        in_features=input_shape[-1],
        activation_class=torch.nn.Tanh,
        out_features=num_outputs,
        num_cells=[64, 64],
        device=device,
    )
    for layer in policy_mlp.modules():
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.orthogonal_(layer.weight, 1.0)
            layer.bias.data.zero_()

    policy_module = ProbabilisticActor(
        TensorDictModule(
            module=policy_mlp,
            in_keys=["observation"],
            out_keys=["logits"],
        ),
        in_keys=["logits"],
        spec=proof_environment.full_action_spec_unbatched.to(device),
        distribution_class=OneHotCategorical,
        return_log_prob=True,
        default_interaction_type=ExplorationType.RANDOM,
    )

    # Value network
    value_mlp = MLP(
        in_features=input_shape[-1],
        activation_class=torch.nn.Tanh,
        out_features=1,
        num_cells=[64, 64],
        device=device,
    )
    for layer in value_mlp.modules():
        if isinstance(layer, torch.nn.Linear):
            torch.nn.init.orthogonal_(layer.weight, 0.01)
            layer.bias.data.zero_()

    value_module = ValueOperator(
        value_mlp,
        in_keys=["observation"],
    )
    return policy_module, value_module


def make_ppo_models(env_name, device, *, compile: bool = False):
    proof_environment = make_env(env_name, device="cpu")
    actor, critic = make_ppo_models_state(proof_environment, device=device, compile=compile)
    return actor, critic


# ====================================================================
# Evaluation utils
# --------------------------------------------------------------------


def dump_video(module):
    if isinstance(module, VideoRecorder):
        module.dump()


def eval_model(actor, test_env, num_episodes=3):
    test_rewards = []
    for _ in range(num_episodes):
        td_test = test_env.rollout(
            policy=actor,
            auto_reset=True,
            auto_cast_to_device=True,
            break_when_any_done=True,
            max_steps=10_000_000,
        )
        reward = td_test["next", "episode_reward"][td_test["next", "done"]]
        test_rewards = np.append(test_rewards, reward.cpu().numpy())
        test_env.apply(dump_video)
    del td_test
    return test_rewards.mean()
