"""Build envs, networks and policies from a run config."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Mapping
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import CartPoleEnv, EnvBase, PendulumV1Env
from tdrl.modules import (
    MLP,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
    ValueOperator,
)
from tdrl.specs import Bounded, Categorical, OneHot, TensorSpec

__all__ = ["BUILTIN_ENVS", "activation_class", "is_discrete", "make_actor_critic", "make_env"]

BUILTIN_ENVS: dict[str, type[EnvBase]] = {"CartPole": CartPoleEnv, "Pendulum": PendulumV1Env}
_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def activation_class(name: str) -> type[nn.Module]:
    """The activation class for a config name (``tanh``, ``relu``, ``elu``, ``gelu``)."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"activation_class: unknown activation (got {name!r}; expected one of "
            f"{sorted(_ACTIVATIONS)})."
        ) from None


def make_env(
    name: str,
    num_envs: int,
    *,
    seed: int,
    device: str = "cpu",
    options: Mapping[str, Any] | None = None,
    processes: int = 0,
) -> EnvBase:
    """A batched env: a built-in name (``CartPole``, ``Pendulum``, the multi-agent
    ``Navigation``), ``gym:<id>``, ``vmas:<scenario>`` or ``pettingzoo:<task>``.

    ``options`` (the config's ``env_options``) configure the multi-agent envs (see
    :func:`~tdrl.train._multiagent_envs.make_multiagent_env`); the others take none. With
    ``processes`` (the config's ``env_processes``) > 0 the envs step in that many worker
    processes: a :class:`~tdrl.envs.ParallelEnv` of batch ``[processes, num_envs / processes]``.
    Its workers ignore SIGTERM (a scheduler may send it to every process of a job): the
    trainer closes them after its final checkpoint, and they end with it in any case.

    Examples:
        >>> make_env("CartPole", 4, seed=0).batch_size
        torch.Size([4])
    """
    if processes:
        return _parallel_env(name, num_envs, processes, seed, device, options)
    env = _build_env(name, num_envs, device, options, seed)
    env.set_seed(seed)
    return env


def _build_env(
    name: str, num_envs: int, device: str, options: Mapping[str, Any] | None, seed: int = 0
) -> EnvBase:
    from tdrl.train._multiagent_envs import is_multiagent_env, make_multiagent_env

    if is_multiagent_env(name):
        return make_multiagent_env(name, num_envs, seed=seed, device=device, options=options)
    if options and options.get("preprocessing") == "atari":  # the Atari presets
        from tdrl.train._atari import make_atari_envs

        return make_atari_envs(name, num_envs, device, options)
    if options:
        raise ValueError(
            f"make_env: the env {name!r} takes no env_options (got {dict(options)}; expected "
            "none: they configure the multi-agent envs). Drop them."
        )
    if name.startswith("gym:"):
        from tdrl.envs import GymEnv

        env: EnvBase = _float32_observations(GymEnv(name[4:], num_envs=num_envs, device=device))
    elif name in BUILTIN_ENVS:
        env = BUILTIN_ENVS[name](batch_size=(num_envs,), device=device)
    else:
        raise ValueError(
            f"make_env: unknown env (got {name!r}; expected one of "
            f"{sorted(BUILTIN_ENVS)} + ['Navigation'], 'gym:<gymnasium id>', "
            "'vmas:<scenario>' or 'pettingzoo:<task>')."
        )
    return env


def _float32_observations(env: EnvBase) -> EnvBase:
    """``env`` seen through :class:`~tdrl.envs.transforms.DoubleToFloat` when it has float64
    observations (MuJoCo's): the presets' networks are float32 (TorchRL's MuJoCo recipes add
    the same transform)."""
    spec = env.observation_spec
    if not any(leaf.dtype == torch.float64 for leaf in spec.values(True, True)):
        return env
    from tdrl.envs.transforms import DoubleToFloat, TransformedEnv

    return TransformedEnv(env, DoubleToFloat())


def _parallel_env(
    name: str,
    num_envs: int,
    processes: int,
    seed: int,
    device: str,
    options: Mapping[str, Any] | None,
) -> EnvBase:
    from tdrl.envs import ParallelEnv

    ok = isinstance(processes, int) and not isinstance(processes, bool) and processes > 0
    if not ok or num_envs % processes:
        raise ValueError(
            f"make_env: env_processes must be an int > 0 that divides num_envs (got "
            f"env_processes={processes!r} for num_envs={num_envs}; expected e.g. 2 for 8 envs). "
            "Set env_processes=0 to step the envs in this process."
        )
    factory = functools.partial(
        _worker_env, name, num_envs // processes, device, options, os.getpid()
    )
    env = ParallelEnv(processes, factory, device=device)
    env.set_seed(seed)
    return env


def _worker_env(
    name: str, num_envs: int, device: str, options: Mapping[str, Any] | None, trainer_pid: int
) -> EnvBase:
    """A ParallelEnv worker's env (also built once in the trainer's process, for its specs)."""
    if os.getpid() != trainer_pid:
        # SLURM signals every process of a job: the worker must outlive the trainer's stop
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _build_env(name, num_envs, device, options)


def is_discrete(spec: TensorSpec) -> bool:
    """Whether an action spec is one-hot or categorical."""
    return isinstance(spec, OneHot | Categorical)


def _obs_dim(env: EnvBase) -> int:
    return int(env.observation_spec["observation"].shape[-1])


def make_actor_critic(env: EnvBase, model_cfg: dict[str, Any]) -> tuple[nn.Module, nn.Module]:
    """A probabilistic actor (one-hot categorical or tanh-normal) and a state-value critic.

    Examples:
        >>> actor, critic = make_actor_critic(make_env("CartPole", 2, seed=0), {"hidden": [8]})
        >>> critic.out_keys
        ['state_value']
    """
    if model_cfg.get("network") == "nature_cnn":  # ppo_atari: shared-trunk CNN on pixels
        from tdrl.train._atari import make_atari_actor_critic

        return make_atari_actor_critic(env, model_cfg)
    hidden = list(model_cfg.get("hidden", [64, 64]))
    act = activation_class(model_cfg.get("activation", "tanh"))
    spec = env.action_spec
    n_obs = _obs_dim(env)
    if is_discrete(spec):
        n = int(spec.n)  # type: ignore[attr-defined]
        net: nn.Module = MLP(in_features=n_obs, out_features=n, num_cells=hidden, activation=act)
        _small_init(net)
        actor = ProbabilisticActor(
            _td_module(net, ["observation"], ["logits"]),
            ["logits"],
            distribution_class=OneHotCategorical,
            spec=spec,
            return_log_prob=True,
        )
    else:
        assert isinstance(spec, Bounded)
        dim = int(spec.shape[-1])
        net = nn.Sequential(
            MLP(in_features=n_obs, out_features=2 * dim, num_cells=hidden, activation=act),
            NormalParamExtractor(),
        )
        actor = ProbabilisticActor(
            _td_module(net, ["observation"], ["loc", "scale"]),
            ["loc", "scale"],
            distribution_class=TanhNormal,
            spec=spec,
            return_log_prob=True,
        )
    critic_net = MLP(in_features=n_obs, out_features=1, num_cells=hidden, activation=act)
    critic = ValueOperator(critic_net, in_keys=["observation"])
    return actor, critic


def _td_module(net: nn.Module, in_keys: list[str], out_keys: list[str]) -> TensorDictModule:
    return TensorDictModule(net, in_keys=in_keys, out_keys=out_keys)


@torch.no_grad()
def _small_init(net: nn.Module) -> None:
    """Scales the last layer down so the initial policy is close to uniform."""
    last = [m for m in net.modules() if isinstance(m, nn.Linear)][-1]
    last.weight.mul_(0.01)
    last.bias.zero_()
