"""The ``make_*`` helpers of the offline IQL script (TorchRL's ``iql/utils.py`` layout).

TorchRL's ``make_offline_replay_buffer`` loads a D4RL dataset into a ``D4RLExperienceReplay``
(``SamplerWithoutReplacement(drop_last=True)``, ``prefetch=4``, a ``DoubleToFloat`` buffer
transform). Here the same buffer is filled with a dataset collected by a random policy
(``Collector`` without a policy), as a user without D4RL would. ``ACTIVATIONS`` comes from
``torchrl.trainers.helpers.models`` in TorchRL; it is defined here (tdrl has no ``trainers``
helpers).
"""

from __future__ import annotations

import functools

import torch.nn
import torch.optim
from tensordict.nn import TensorDictModule
from tensordict.nn.distributions import NormalParamExtractor

from tdrl.collectors import Collector
from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers import SamplerWithoutReplacement
from tdrl.envs import (
    Compose,
    DoubleToFloat,
    EnvCreator,
    InitTracker,
    ParallelEnv,
    RewardSum,
    TransformedEnv,
)
from tdrl.envs.libs.gym import GymEnv, set_gym_backend
from tdrl.envs.utils import ExplorationType, set_exploration_type
from tdrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from tdrl.objectives import IQLLoss, SoftUpdate
from tdrl.record import VideoRecorder

ACTIVATIONS = {
    "elu": torch.nn.ELU,
    "tanh": torch.nn.Tanh,
    "relu": torch.nn.ReLU,
}

# ====================================================================
# Environment utils
# -----------------


def env_maker(cfg, device="cpu", from_pixels=False):
    lib = cfg.env.backend
    if lib in ("gym", "gymnasium"):
        with set_gym_backend(lib):
            return GymEnv(
                cfg.env.name,
                device=device,
                from_pixels=from_pixels,
                pixels_only=False,
                categorical_action_encoding=True,
            )
    raise NotImplementedError(f"Unknown lib {lib}.")


def apply_env_transforms(
    env,
):
    transformed_env = TransformedEnv(
        env,
        Compose(
            InitTracker(),
            DoubleToFloat(),
            RewardSum(),
        ),
    )
    return transformed_env


def make_environment(cfg, train_num_envs=1, eval_num_envs=1, logger=None):
    """Make environments for training and evaluation."""
    maker = functools.partial(env_maker, cfg)
    parallel_env = ParallelEnv(
        train_num_envs,
        EnvCreator(maker),
        serial_for_single=True,
    )
    parallel_env.set_seed(cfg.env.seed)

    train_env = apply_env_transforms(parallel_env)

    maker = functools.partial(env_maker, cfg, from_pixels=cfg.logger.video)
    eval_env = TransformedEnv(
        ParallelEnv(
            eval_num_envs,
            EnvCreator(maker),
            serial_for_single=True,
        ),
        train_env.transform.clone(),
    )
    if cfg.logger.video:
        eval_env.insert_transform(0, VideoRecorder(logger, tag="rendered", in_keys=["pixels"]))
    return train_env, eval_env


# ====================================================================
# Replay buffers
# ---------------------------


def make_replay_buffer(
    batch_size,
    prb=False,
    buffer_size=1000000,
    scratch_dir=None,
    device="cpu",
    prefetch=3,
):
    if prb:
        replay_buffer = TensorDictPrioritizedReplayBuffer(
            alpha=0.7,
            beta=0.5,
            pin_memory=False,
            prefetch=prefetch,
            storage=LazyMemmapStorage(
                buffer_size,
                scratch_dir=scratch_dir,
                device=device,
            ),
            batch_size=batch_size,
        )
    else:
        replay_buffer = TensorDictReplayBuffer(
            pin_memory=False,
            prefetch=prefetch,
            storage=LazyMemmapStorage(
                buffer_size,
                scratch_dir=scratch_dir,
                device=device,
            ),
            batch_size=batch_size,
        )
    return replay_buffer


def make_offline_replay_buffer(rb_cfg, cfg):
    # The dataset: transitions of a random policy (a Collector without a policy)
    env = env_maker(cfg)
    env.set_seed(cfg.env.seed)
    collector = Collector(
        env,
        None,
        frames_per_batch=rb_cfg.dataset_size,
        total_frames=rb_cfg.dataset_size,
        split_trajs=False,
    )
    dataset = next(iter(collector))
    collector.shutdown()

    data = TensorDictReplayBuffer(
        storage=LazyTensorStorage(rb_cfg.dataset_size),
        batch_size=rb_cfg.batch_size,
        # We use drop_last to avoid recompiles (and dynamic shapes)
        sampler=SamplerWithoutReplacement(drop_last=True),
        prefetch=4,
    )
    data.extend(dataset.reshape(-1))

    data.append_transform(DoubleToFloat())

    return data


# ====================================================================
# Model
# -----


def make_iql_model(cfg, train_env, eval_env, device="cpu"):
    model_cfg = cfg.model

    in_keys = ["observation"]
    action_spec = train_env.action_spec_unbatched
    actor_net, q_net, value_net = make_iql_modules_state(model_cfg, eval_env)

    out_keys = ["loc", "scale"]

    actor_module = TensorDictModule(actor_net, in_keys=in_keys, out_keys=out_keys)

    # We use a ProbabilisticActor to make sure that we map the
    # network output to the right space using a TanhDelta
    # distribution.
    actor = ProbabilisticActor(
        module=actor_module,
        in_keys=["loc", "scale"],
        spec=action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": action_spec.space.low.to(device),
            "high": action_spec.space.high.to(device),
            "tanh_loc": False,
        },
        default_interaction_type=ExplorationType.RANDOM,
    )

    in_keys = ["observation", "action"]

    out_keys = ["state_action_value"]
    qvalue = ValueOperator(
        in_keys=in_keys,
        out_keys=out_keys,
        module=q_net,
    )
    in_keys = ["observation"]
    out_keys = ["state_value"]
    value_net = ValueOperator(
        in_keys=in_keys,
        out_keys=out_keys,
        module=value_net,
    )
    model = torch.nn.ModuleList([actor, qvalue, value_net]).to(device)
    # init nets
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        td = eval_env.fake_tensordict()
        td = td.to(device)
        for net in model:
            net(td)

    return model


def make_iql_modules_state(model_cfg, proof_environment):
    action_spec = proof_environment.action_spec_unbatched

    actor_net_kwargs = {
        "num_cells": model_cfg.hidden_sizes,
        "out_features": 2 * action_spec.shape[-1],
        "activation_class": ACTIVATIONS[model_cfg.activation],
    }
    actor_net = MLP(**actor_net_kwargs)
    actor_extractor = NormalParamExtractor(
        scale_mapping=f"biased_softplus_{model_cfg.default_policy_scale}",
        scale_lb=model_cfg.scale_lb,
    )
    actor_net = torch.nn.Sequential(actor_net, actor_extractor)

    qvalue_net_kwargs = {
        "num_cells": model_cfg.hidden_sizes,
        "out_features": 1,
        "activation_class": ACTIVATIONS[model_cfg.activation],
    }

    q_net = MLP(**qvalue_net_kwargs)

    # Define Value Network
    value_net_kwargs = {
        "num_cells": model_cfg.hidden_sizes,
        "out_features": 1,
        "activation_class": ACTIVATIONS[model_cfg.activation],
    }
    value_net = MLP(**value_net_kwargs)

    return actor_net, q_net, value_net


# ====================================================================
# IQL Loss
# ---------


def make_loss(loss_cfg, model, device):
    loss_module = IQLLoss(
        model[0],
        model[1],
        value_network=model[2],
        loss_function=loss_cfg.loss_function,
        temperature=loss_cfg.temperature,
        expectile=loss_cfg.expectile,
    )
    loss_module.make_value_estimator(gamma=loss_cfg.gamma, device=device)
    target_net_updater = SoftUpdate(loss_module, tau=loss_cfg.tau)

    return loss_module, target_net_updater


def make_iql_optimizer(optim_cfg, loss_module):
    critic_params = list(loss_module.qvalue_network_params.flatten_keys().values())
    actor_params = list(loss_module.actor_network_params.flatten_keys().values())
    value_params = list(loss_module.value_network_params.flatten_keys().values())

    optimizer_actor = torch.optim.Adam(
        actor_params,
        lr=optim_cfg.lr,
        weight_decay=optim_cfg.weight_decay,
    )
    optimizer_critic = torch.optim.Adam(
        critic_params,
        lr=optim_cfg.lr,
        weight_decay=optim_cfg.weight_decay,
    )
    optimizer_value = torch.optim.Adam(
        value_params,
        lr=optim_cfg.lr,
        weight_decay=optim_cfg.weight_decay,
    )
    return optimizer_actor, optimizer_critic, optimizer_value


# ====================================================================
# General utils
# ---------


def log_metrics(logger, metrics, step):
    if logger is not None:
        logger.log_metrics(metrics, step)


def dump_video(module):
    if isinstance(module, VideoRecorder):
        module.dump()
