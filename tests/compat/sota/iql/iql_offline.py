"""Offline IQL on Pendulum, written the way TorchRL's ``sota-implementations/iql/iql_offline.py``
is.

A user's copy with the imports swapped (``torchrl`` -> ``tdrl``): ``set_gym_backend(...).set()``,
an ``IQLLoss`` with actor, Q and value networks, ``SoftUpdate(tau=...)``, three Adam optimizers
grouped by ``group_optimizers``, gradient steps on an offline buffer (``SamplerWithoutReplacement
(drop_last=True)``, prefetching, a ``DoubleToFloat`` buffer transform; see ``utils_iql``),
evaluation rollouts on a ``ParallelEnv`` with a ``VideoRecorder``, ``timeit`` and ``get_logger``.
Added to TorchRL's script: ``main`` returns what it logged.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import tqdm
from tensordict.nn import CudaGraphModule
from utils_iql import (
    dump_video,
    log_metrics,
    make_environment,
    make_iql_model,
    make_iql_optimizer,
    make_loss,
    make_offline_replay_buffer,
)

from tdrl._utils import get_available_device, timeit
from tdrl.envs import set_gym_backend
from tdrl.envs.utils import ExplorationType, set_exploration_type
from tdrl.objectives import group_optimizers
from tdrl.record.loggers import generate_exp_name, get_logger


def main(cfg):
    torch.set_float32_matmul_precision("high")
    set_gym_backend(cfg.env.backend).set()

    # Create logger
    exp_name = generate_exp_name("IQL-offline", cfg.logger.exp_name)
    logger = None
    if cfg.logger.backend:
        logger = get_logger(
            logger_type=cfg.logger.backend,
            logger_name="iql_logging",
            experiment_name=exp_name,
            wandb_kwargs={
                "mode": cfg.logger.mode,
                "config": dict(cfg),
                "project": cfg.logger.project_name,
                "group": cfg.logger.group_name,
            },
        )

    # Set seeds
    torch.manual_seed(cfg.env.seed)
    np.random.seed(cfg.env.seed)
    device = torch.device(cfg.optim.device) if cfg.optim.device else get_available_device()

    # Create env
    train_env, eval_env = make_environment(
        cfg,
        cfg.logger.eval_envs,
        logger=logger,
    )

    # Create replay buffer
    replay_buffer = make_offline_replay_buffer(cfg.replay_buffer, cfg)

    # Create model
    model = make_iql_model(cfg, train_env, eval_env, device)

    # Create loss
    loss_module, target_net_updater = make_loss(cfg.loss, model, device=device)

    # Create optimizer
    optimizer_actor, optimizer_critic, optimizer_value = make_iql_optimizer(cfg.optim, loss_module)
    optimizer = group_optimizers(optimizer_actor, optimizer_critic, optimizer_value)

    def update(data):
        optimizer.zero_grad(set_to_none=True)
        # compute losses
        loss_info = loss_module(data)
        actor_loss = loss_info["loss_actor"]
        value_loss = loss_info["loss_value"]
        q_loss = loss_info["loss_qvalue"]

        (actor_loss + value_loss + q_loss).backward()
        optimizer.step()

        # update qnet_target params
        target_net_updater.step()
        return loss_info.detach()

    compile_mode = None
    if cfg.compile.compile:
        compile_mode = cfg.compile.compile_mode
        if compile_mode in ("", None):
            if cfg.compile.cudagraphs:
                compile_mode = "default"
            else:
                compile_mode = "reduce-overhead"

    if cfg.compile.compile:
        update = torch.compile(update, mode=compile_mode)
    if cfg.compile.cudagraphs:
        warnings.warn(
            "CudaGraphModule is experimental and may lead to silently wrong results. Use with caution.",
            category=UserWarning,
            stacklevel=1,
        )
        update = CudaGraphModule(update, warmup=50)

    pbar = tqdm.tqdm(range(cfg.optim.gradient_steps))

    evaluation_interval = cfg.logger.eval_iter
    eval_steps = cfg.logger.eval_steps
    history = []

    # Training loop
    for i in pbar:
        timeit.printevery(1000, cfg.optim.gradient_steps, erase=True)

        # sample data
        with timeit("sample"):
            data = replay_buffer.sample()
            data = data.to(device)

        with timeit("update"):
            torch.compiler.cudagraph_mark_step_begin()
            loss_info = update(data)

        # evaluation
        metrics_to_log = loss_info.to_dict()
        if i % evaluation_interval == 0:
            with (
                set_exploration_type(ExplorationType.DETERMINISTIC),
                torch.no_grad(),
                timeit("eval"),
            ):
                eval_td = eval_env.rollout(
                    max_steps=eval_steps, policy=model[0], auto_cast_to_device=True
                )
                eval_env.apply(dump_video)
            eval_reward = eval_td["next", "reward"].sum(1).mean().item()
            metrics_to_log["evaluation_reward"] = eval_reward
        history.append(dict(metrics_to_log))
        if logger is not None:
            metrics_to_log.update(timeit.todict(prefix="time"))
            # tqdm has no rate before the end of the first iteration, and TorchRL's CSVLogger
            # (like tdrl's) refuses None: the speed is logged once there is one.
            if pbar.format_dict["rate"] is not None:
                metrics_to_log["time/speed"] = pbar.format_dict["rate"]
            log_metrics(logger, metrics_to_log, i)

    pbar.close()
    if not eval_env.is_closed:
        eval_env.close()
    if not train_env.is_closed:
        train_env.close()
    return {"history": history, "data": data, "logger": logger, "buffer": replay_buffer}


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _config import load_config

    main(load_config(Path(__file__).with_name("config.yaml"), sys.argv[1:]))
