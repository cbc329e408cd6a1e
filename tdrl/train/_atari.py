"""The Atari presets (``dqn_atari``, ``ppo_atari``): the envs, the Nature-DQN networks, the
end-of-life targets and the DQN replay buffer's lean pixel storage.

A config is an Atari config when its ``env_options`` table says ``preprocessing = "atari"``;
the table's other keys go to :func:`~tdrl.envs.make_atari_env` for each game.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import EnvBase, make_atari_env
from tdrl.envs.batched import SerialEnv
from tdrl.modules import (
    ActorValueOperator,
    ConvNet,
    DuelingCnnDQNet,
    OneHotCategorical,
    ProbabilisticActor,
    ValueOperator,
)

__all__ = [
    "ATARI_OPTIONS",
    "NatureTrunk",
    "is_atari_config",
    "make_atari_actor_critic",
    "make_atari_envs",
    "make_atari_qnet",
    "restack_next_pixels",
]

# make_atari_env's arguments an Atari config's env_options may set (besides "preprocessing")
ATARI_OPTIONS = (
    "noop_max",
    "frame_skip",
    "screen_size",
    "frame_stack",
    "end_of_life",
    "sign_reward",
    "repeat_action_probability",
    "full_action_space",
)
_NATURE_CONV = {"num_cells": [32, 64, 64], "kernel_sizes": [8, 4, 3], "strides": [4, 2, 1]}


def is_atari_config(options: Mapping[str, Any] | None) -> bool:
    """Whether ``env_options`` ask for the Atari preprocessing (``preprocessing = "atari"``).

    Examples:
        >>> is_atari_config({"preprocessing": "atari"}), is_atari_config(None)
        (True, False)
    """
    return bool(options) and options.get("preprocessing") == "atari"  # type: ignore[union-attr]


def make_atari_envs(name: str, num_envs: int, device: str, options: Mapping[str, Any]) -> EnvBase:
    """``num_envs`` games of ``gym:<ALE id>``, each with :func:`~tdrl.envs.make_atari_env`'s
    preprocessing (the ``env_options`` as its arguments), stepped one after the other in this
    process (a :class:`~tdrl.envs.batched.SerialEnv` of batch ``[num_envs]``; ``make_env``'s
    ``processes`` spreads them over worker processes).

    Raises:
        ValueError: not a ``gym:`` id, or an option ``make_atari_env`` does not take.
    """
    if not name.startswith("gym:"):
        raise ValueError(
            f"make_env: the Atari preprocessing needs a gymnasium ALE id (got env {name!r}; "
            "expected e.g. 'gym:ALE/Breakout-v5'). Pass --env gym:ALE/<Game>-v5."
        )
    kwargs = {k: v for k, v in options.items() if k != "preprocessing"}
    unknown = sorted(set(kwargs) - set(ATARI_OPTIONS))
    if unknown:
        raise ValueError(
            f"make_env: unknown Atari env_options {unknown} (got {dict(options)}; expected "
            f"'preprocessing' and any of {list(ATARI_OPTIONS)}). Check the spelling."
        )
    factory = functools.partial(make_atari_env, name[4:], device=device, **kwargs)
    return SerialEnv(num_envs, factory, device=device)


class NatureTrunk(nn.Sequential):
    """The Nature-DQN trunk (Mnih et al. 2015): uint8 screens ``[*B, C, 84, 84]`` scaled to
    [0, 1], three ReLU convolutions (32 8x8/4, 64 4x4/2, 64 3x3/1; a :class:`ConvNet`), then a
    ReLU linear layer of ``features`` units.

    Examples:
        >>> trunk = NatureTrunk(4)
        >>> trunk(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 512])
    """

    def __init__(self, in_channels: int, screen_size: int = 84, features: int = 512) -> None:
        conv = ConvNet(in_channels, activation_class=nn.ReLU, **_NATURE_CONV)  # type: ignore[arg-type]
        flat = _conv_features(conv, in_channels, screen_size)
        super().__init__(_Scale255(), conv, nn.Linear(flat, features), nn.ReLU())
        self.out_features = features


class _Scale255(nn.Module):
    """uint8 screens to floats in [0, 1] (the networks' input; the buffer keeps uint8)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.get_default_dtype()).div(255.0)


@torch.no_grad()
def _conv_features(conv: nn.Module, channels: int, size: int) -> int:
    return int(conv(torch.zeros(1, channels, size, size)).shape[-1])


@torch.no_grad()
def _orthogonal(module: nn.Module, gain: float) -> None:
    """CleanRL's ``layer_init``: orthogonal weights of ``gain``, zero biases."""
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d | nn.Linear):
            nn.init.orthogonal_(layer.weight, gain)
            if layer.bias is not None:
                layer.bias.zero_()


def _screen(env: EnvBase) -> tuple[int, int]:
    shape = env.observation_spec["pixels"].shape
    return int(shape[-3]), int(shape[-1])


def make_atari_qnet(env: EnvBase, model_cfg: Mapping[str, Any]) -> nn.Module:
    """The Q-network of ``dqn_atari``: :class:`NatureTrunk` + a linear layer per action, or
    (``model.dueling``) a :class:`DuelingCnnDQNet` with the Nature convolutions and ReLU.

    Examples:
        >>> from tdrl.train._builders import make_env
        >>> env = make_env("gym:ALE/Pong-v5", 1, seed=0, options={"preprocessing": "atari"})
        >>> make_atari_qnet(env, {})(env.reset()["pixels"]).shape
        torch.Size([1, 6])
        >>> env.close()
    """
    channels, size = _screen(env)
    n = int(env.action_spec.n)  # type: ignore[attr-defined]
    if model_cfg.get("dueling", False):
        conv = ConvNet(channels, activation_class=nn.ReLU, **_NATURE_CONV)  # type: ignore[arg-type]
        flat = _conv_features(conv, channels, size)
        dueling = DuelingCnnDQNet(
            n,
            cnn_kwargs={"in_features": channels, "activation_class": nn.ReLU},
            mlp_kwargs={"in_features": flat, "activation_class": nn.ReLU},
        )
        return nn.Sequential(_Scale255(), dueling)
    trunk = NatureTrunk(channels, size)
    return nn.Sequential(trunk, nn.Linear(trunk.out_features, n))


def make_atari_actor_critic(
    env: EnvBase, model_cfg: Mapping[str, Any]
) -> tuple[nn.Module, nn.Module]:
    """The shared-trunk actor-critic of ``ppo_atari`` (CleanRL's ``ppo_atari.py`` agent): one
    :class:`NatureTrunk` writing ``"hidden"``, a linear policy head (logits of a one-hot
    categorical) and a linear value head, joined by an :class:`ActorValueOperator`; the actor
    and the critic it returns share the trunk's parameters. Orthogonal initialisation as
    CleanRL: gain sqrt(2) in the trunk, 0.01 on the policy head, 1 on the value head.

    Examples:
        >>> from tdrl.train._builders import make_env
        >>> env = make_env("gym:ALE/Pong-v5", 1, seed=0, options={"preprocessing": "atari"})
        >>> actor, critic = make_atari_actor_critic(env, {})
        >>> actor[0] is critic[0]  # one trunk
        True
        >>> env.close()
    """
    channels, size = _screen(env)
    trunk = NatureTrunk(channels, size, int(model_cfg.get("features", 512)))
    _orthogonal(trunk, math.sqrt(2))
    n = int(env.action_spec.n)  # type: ignore[attr-defined]  # a discrete spec: One-hot
    logits, value = nn.Linear(trunk.out_features, n), nn.Linear(trunk.out_features, 1)
    _orthogonal(logits, 0.01)
    _orthogonal(value, 1.0)
    policy = ProbabilisticActor(
        TensorDictModule(logits, ["hidden"], ["logits"]),
        ["logits"],
        distribution_class=OneHotCategorical,
        spec=env.action_spec,
        return_log_prob=True,
    )
    operator = ActorValueOperator(
        TensorDictModule(trunk, ["pixels"], ["hidden"]),
        policy,
        ValueOperator(value, in_keys=["hidden"]),
    )
    return operator.get_policy_operator(), operator.get_value_operator()


def restack_next_pixels(batch: TensorDictBase) -> TensorDictBase:
    """Rebuilds a sampled batch's ``("next", "pixels")`` stack from ``"pixels"`` and the one
    stored next screen: within an episode the next stack is the current one shifted by a
    screen, with the new screen last (``CatFrames``), so the buffer keeps ``frame_stack + 1``
    screens per transition instead of ``2 * frame_stack``.

    Examples:
        >>> from tensordict import TensorDict
        >>> px = torch.arange(4, dtype=torch.uint8).reshape(1, 4, 1, 1)
        >>> td = TensorDict({"pixels": px, ("next", "pixels"): px[:, -1:] + 1}, batch_size=[1])
        >>> restack_next_pixels(td)["next", "pixels"].flatten().tolist()
        [1, 2, 3, 4]
    """
    pixels, last = batch.get("pixels"), batch.get(("next", "pixels"))
    batch.set(("next", "pixels"), torch.cat([pixels[..., 1:, :, :], last], dim=-3))
    return batch
