"""Networks, losses and exploration for the off-policy presets (DQN, SAC, TD3, DDPG)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from tdrl.envs import EnvBase
from tdrl.modules import (
    MLP,
    Actor,
    AdditiveGaussianModule,
    EGreedyModule,
    NormalParamExtractor,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from tdrl.objectives import LossModule
from tdrl.train._builders import activation_class, is_discrete

__all__ = ["Agent", "make_agent"]


@dataclass
class Agent:
    """What the off-policy trainer needs from an algorithm.

    Attributes:
        loss: the loss module (its parameters are trained).
        policy: the deterministic/greedy policy used for evaluation.
        collect_policy: the policy with exploration used to collect data.
        exploration: a module whose ``step(frames)`` anneals its noise (or None).
        actor_loss_keys: loss terms of the actor, delayed by ``policy_delay`` (TD3).
    """

    loss: LossModule
    policy: nn.Module
    collect_policy: nn.Module
    exploration: Any = None
    actor_loss_keys: tuple[str, ...] = ()


def _mlp(n_in: int, n_out: int, cfg: dict[str, Any]) -> MLP:
    return MLP(
        in_features=n_in,
        out_features=n_out,
        num_cells=list(cfg.get("hidden", [256, 256])),
        activation_class=activation_class(cfg.get("activation", "relu")),
    )


def _dims(env: EnvBase) -> tuple[int, int]:
    return int(env.observation_spec["observation"].shape[-1]), int(env.action_spec.shape[-1])


def make_agent(algorithm: str, env: EnvBase, config: dict[str, Any]) -> Agent:
    """Builds the agent of one off-policy preset for ``env``.

    Examples:
        >>> from tdrl.train._builders import make_env
        >>> agent = make_agent("dqn", make_env("CartPole", 2, seed=0), {"model": {"hidden": [8]}})
        >>> type(agent.loss).__name__
        'DQNLoss'
    """
    builders = {"dqn": _dqn, "sac": _sac, "td3": _td3, "ddpg": _ddpg}
    if algorithm not in builders:
        raise ValueError(
            f"make_agent: unknown off-policy algorithm (got {algorithm!r}; expected one of "
            f"{sorted(builders)})."
        )
    return builders[algorithm](env, config)


def _dqn(env: EnvBase, config: dict[str, Any]) -> Agent:
    from tdrl.objectives import DQNLoss  # type: ignore[attr-defined]

    spec = env.action_spec
    if not is_discrete(spec):
        raise ValueError(
            f"dqn: the env's action spec must be discrete (got {type(spec).__name__})."
        )
    mc = config.get("model", {})
    if mc.get("network") == "nature_cnn":  # dqn_atari: the Nature-DQN CNN on uint8 screens
        from tdrl.train._atari import make_atari_qnet

        policy = QValueActor(make_atari_qnet(env, mc), ["pixels"], spec=spec)
    else:
        n_obs = int(env.observation_spec["observation"].shape[-1])
        net = _mlp(n_obs, int(spec.n), mc)  # type: ignore[attr-defined]
        policy = QValueActor(net, ["observation"], spec=spec)
    lc, ec = config.get("loss", {}), config.get("exploration", {})
    # The loss gets the Q-network alone (the argmax head is only needed to act): it shares the
    # policy's parameters and lets the loss run the plain MLP straight from its weights.
    loss = DQNLoss(
        policy[0],
        action_space=spec,
        loss_function=lc.get("loss_function", "l2"),
        double_dqn=bool(lc.get("double_dqn", False)),
    )
    loss.make_value_estimator("TD0", gamma=float(lc.get("gamma", 0.99)))
    greedy = EGreedyModule(
        spec,
        float(ec.get("eps_init", 1.0)),
        eps_end=float(ec.get("eps_end", 0.05)),
        annealing_num_steps=int(ec.get("annealing_frames", 10_000)),
    )
    return Agent(loss, policy, TensorDictSequential(policy, greedy), greedy)


def _continuous_actor(env: EnvBase, config: dict[str, Any], stochastic: bool) -> nn.Module:
    n_obs, n_act = _dims(env)
    mc = config.get("model", {})
    if stochastic:
        net = nn.Sequential(_mlp(n_obs, 2 * n_act, mc), NormalParamExtractor())
        return ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]),
            ["loc", "scale"],
            distribution_class=TanhNormal,
            spec=env.action_spec,
            return_log_prob=False,
        )
    net = nn.Sequential(_mlp(n_obs, n_act, mc), nn.Tanh())
    low, high = env.action_spec.low, env.action_spec.high  # type: ignore[attr-defined]
    return Actor(
        _Rescale(net, low.flatten()[-n_act:], high.flatten()[-n_act:]), spec=env.action_spec
    )


class _Rescale(nn.Module):
    """Maps a tanh output in [-1, 1] onto the action bounds."""

    def __init__(self, net: nn.Module, low: Any, high: Any) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("radius", (high - low) / 2)

    def forward(self, x: Any) -> Any:
        return self.center + self.radius * self.net(x)


def _qvalue(env: EnvBase, config: dict[str, Any]) -> ValueOperator:
    n_obs, n_act = _dims(env)
    return ValueOperator(
        _mlp(n_obs + n_act, 1, config.get("model", {})), in_keys=["observation", "action"]
    )


def _gaussian(env: EnvBase, config: dict[str, Any]) -> AdditiveGaussianModule:
    ec = config.get("exploration", {})
    return AdditiveGaussianModule(
        env.action_spec,
        sigma_init=float(ec.get("sigma_init", 0.1)),
        sigma_end=float(ec.get("sigma_end", 0.1)),
        annealing_num_steps=int(ec.get("annealing_frames", 1)),
    )


def _sac(env: EnvBase, config: dict[str, Any]) -> Agent:
    from tdrl.objectives import SACLoss  # type: ignore[attr-defined]

    actor = _continuous_actor(env, config, stochastic=True)
    lc = config.get("loss", {})
    loss = SACLoss(
        actor,
        _qvalue(env, config),
        num_qvalue_nets=2,
        loss_function=str(lc.get("loss_function", "l2")),
        alpha_init=float(lc.get("alpha_init", 1.0)),
        action_spec=env.action_spec,
    )
    loss.make_value_estimator("TD0", gamma=float(lc.get("gamma", 0.99)))
    return Agent(loss, actor, actor, None)


def _td3(env: EnvBase, config: dict[str, Any]) -> Agent:
    from tdrl.objectives import TD3Loss  # type: ignore[attr-defined]

    actor = _continuous_actor(env, config, stochastic=False)
    lc = config.get("loss", {})
    loss = TD3Loss(
        actor,
        _qvalue(env, config),
        num_qvalue_nets=2,
        policy_noise=float(lc.get("policy_noise", 0.2)),
        noise_clip=float(lc.get("noise_clip", 0.5)),
        action_spec=env.action_spec,
        loss_function=str(lc.get("loss_function", "l2")),
    )
    loss.make_value_estimator("TD0", gamma=float(lc.get("gamma", 0.99)))
    noise = _gaussian(env, config)
    return Agent(loss, actor, TensorDictSequential(actor, noise), noise, ("loss_actor",))


def _ddpg(env: EnvBase, config: dict[str, Any]) -> Agent:
    from tdrl.objectives import DDPGLoss  # type: ignore[attr-defined]

    actor = _continuous_actor(env, config, stochastic=False)
    lc = config.get("loss", {})
    loss = DDPGLoss(actor, _qvalue(env, config))
    loss.make_value_estimator("TD0", gamma=float(lc.get("gamma", 0.99)))
    noise = _gaussian(env, config)
    return Agent(loss, actor, TensorDictSequential(actor, noise), noise)
