"""Networks and losses of the offline presets (IQL, CQL, TD3+BC, BC), continuous and discrete."""

from __future__ import annotations

from typing import Any

from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.envs import EnvBase
from tdrl.modules import (
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from tdrl.specs import OneHot
from tdrl.train._builders import is_discrete
from tdrl.train._off_policy_agents import Agent, _continuous_actor, _dims, _mlp, _qvalue

__all__ = ["OFFLINE_ALGORITHMS", "make_offline_agent"]

OFFLINE_ALGORITHMS = ("iql", "cql", "td3bc", "bc", "dt")


def make_offline_agent(algorithm: str, env: EnvBase, config: dict[str, Any]) -> Agent:
    """The agent of one offline preset for ``env``: the discrete variant (``DiscreteIQLLoss``,
    ``DiscreteCQLLoss``, a categorical BC policy) when the env's actions are discrete.

    Examples:
        >>> from tdrl.train._builders import make_env
        >>> env = make_env("CartPole", 1, seed=0)
        >>> type(make_offline_agent("iql", env, {"model": {"hidden": [8]}}).loss).__name__
        'DiscreteIQLLoss'
    """
    builders = {"iql": _iql, "cql": _cql, "td3bc": _td3bc, "bc": _bc}
    if algorithm == "dt":  # the Decision Transformer: its own module (context windows)
        from tdrl.train._offline_dt import make_dt_agent

        return make_dt_agent(env, config)
    if algorithm not in builders:
        raise ValueError(
            f"make_offline_agent: unknown offline algorithm (got {algorithm!r}; expected one of "
            f"{sorted(builders)})."
        )
    discrete = is_discrete(env.action_spec)
    if discrete and not isinstance(env.action_spec, OneHot):
        raise ValueError(
            f"{algorithm}: discrete actions must be one-hot in the env (got "
            f"{type(env.action_spec).__name__}; expected OneHot, as the built-in and gym envs "
            "give). Build the env with one-hot actions."
        )
    if discrete and algorithm == "td3bc":
        raise ValueError(
            "td3bc: TD3+BC needs continuous actions (got the discrete action spec "
            f"{type(env.action_spec).__name__}). Use iql, cql or bc for discrete actions."
        )
    return builders[algorithm](env, config, discrete)


def _gamma(config: dict[str, Any]) -> float:
    return float(config.get("loss", {}).get("gamma", 0.99))


def _stochastic_actor(env: EnvBase, config: dict[str, Any]) -> ProbabilisticActor:
    """TorchRL's offline actor: TanhNormal over the action bounds, scale through a biased
    softplus bounded below by ``model.scale_lb``."""
    n_obs, n_act = _dims(env)
    mc = config.get("model", {})
    extractor = NormalParamExtractor(
        scale_mapping=f"biased_softplus_{float(mc.get('default_policy_scale', 1.0))}",
        scale_lb=float(mc.get("scale_lb", 0.1)),
    )
    net = nn.Sequential(_mlp(n_obs, 2 * n_act, mc), extractor)
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={
            "low": env.action_spec.low,  # type: ignore[attr-defined]
            "high": env.action_spec.high,  # type: ignore[attr-defined]
        },
        spec=env.action_spec,
    )


def _categorical_actor(env: EnvBase, config: dict[str, Any]) -> ProbabilisticActor:
    n_obs, n = _dims_discrete(env)
    net = _mlp(n_obs, n, config.get("model", {}))
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["logits"]),
        ["logits"],
        distribution_class=OneHotCategorical,
        spec=env.action_spec,
    )


def _dims_discrete(env: EnvBase) -> tuple[int, int]:
    return int(env.observation_spec["observation"].shape[-1]), int(env.action_spec.n)  # type: ignore[attr-defined]


def _state_value(env: EnvBase, config: dict[str, Any]) -> ValueOperator:
    n_obs = int(env.observation_spec["observation"].shape[-1])
    return ValueOperator(_mlp(n_obs, 1, config.get("model", {})), in_keys=["observation"])


def _iql(env: EnvBase, config: dict[str, Any], discrete: bool) -> Agent:
    from tdrl.objectives import DiscreteIQLLoss, IQLLoss

    lc = config.get("loss", {})
    options: dict[str, Any] = {
        "num_qvalue_nets": int(lc.get("num_qvalue_nets", 2)),
        "loss_function": str(lc.get("loss_function", "l2")),
        "temperature": float(lc.get("temperature", 3.0)),
        "expectile": float(lc.get("expectile", 0.7)),
    }
    if discrete:
        n_obs, n = _dims_discrete(env)
        actor = _categorical_actor(env, config)
        qvalue = ValueOperator(
            _mlp(n_obs, n, config.get("model", {})),
            in_keys=["observation"],
            out_keys=["state_action_value"],
        )
        loss: Any = DiscreteIQLLoss(
            actor, qvalue, _state_value(env, config), action_space=env.action_spec, **options
        )
    else:
        actor = _stochastic_actor(env, config)
        loss = IQLLoss(actor, _qvalue(env, config), _state_value(env, config), **options)
    loss.make_value_estimator("TD0", gamma=_gamma(config))
    return Agent(loss, actor, actor, None)


def _cql(env: EnvBase, config: dict[str, Any], discrete: bool) -> Agent:
    from tdrl.objectives import CQLLoss, DiscreteCQLLoss

    lc = config.get("loss", {})
    if discrete:
        n_obs, n = _dims_discrete(env)
        policy = QValueActor(
            _mlp(n_obs, n, config.get("model", {})), ["observation"], spec=env.action_spec
        )
        loss: Any = DiscreteCQLLoss(
            policy[0],
            loss_function=str(lc.get("loss_function", "l2")),
            action_space=env.action_spec,
            min_q_weight=float(lc.get("min_q_weight", 1.0)),
        )
        loss.make_value_estimator("TD0", gamma=_gamma(config))
        return Agent(loss, policy, policy, None)
    actor = _stochastic_actor(env, config)
    loss = CQLLoss(
        actor,
        _qvalue(env, config),
        loss_function=str(lc.get("loss_function", "l2")),
        alpha_init=float(lc.get("alpha_init", 1.0)),
        action_spec=env.action_spec,
        temperature=float(lc.get("temperature", 1.0)),
        min_q_weight=float(lc.get("min_q_weight", 1.0)),
        deterministic_backup=bool(lc.get("deterministic_backup", False)),
        num_random=int(lc.get("num_random", 10)),
        with_lagrange=bool(lc.get("with_lagrange", False)),
        lagrange_thresh=float(lc.get("lagrange_thresh", 0.0)),
    )
    loss.make_value_estimator("TD0", gamma=_gamma(config))
    return Agent(loss, actor, actor, None)


def _td3bc(env: EnvBase, config: dict[str, Any], discrete: bool) -> Agent:
    TD3BCLoss = _needs("TD3BCLoss", "td3bc")
    lc = config.get("loss", {})
    actor = _continuous_actor(env, config, stochastic=False)
    loss = TD3BCLoss(
        actor,
        _qvalue(env, config),
        action_spec=env.action_spec,
        policy_noise=float(lc.get("policy_noise", 0.2)),
        noise_clip=float(lc.get("noise_clip", 0.5)),
        alpha=float(lc.get("alpha", 2.5)),
        loss_function=str(lc.get("loss_function", "l2")),
    )
    loss.make_value_estimator("TD0", gamma=_gamma(config))
    return Agent(loss, actor, actor, None, ("loss_actor",))


def _bc(env: EnvBase, config: dict[str, Any], discrete: bool) -> Agent:
    BCLoss = _needs("BCLoss", "bc")
    if discrete:  # the negative log-likelihood of the data's actions (TorchRL's default)
        actor: nn.Module = _categorical_actor(env, config)
        return Agent(_one_hot_bc(BCLoss)(actor), actor, actor, None)
    actor = _continuous_actor(env, config, stochastic=False)
    lc = config.get("loss", {})
    return Agent(BCLoss(actor, loss_function=str(lc.get("loss_function", "l2"))), actor, actor)


def _one_hot_bc(base: Any) -> Any:
    """BCLoss on one-hot actions in the env's dtype: the built-in envs' one-hot actions are
    int64, which BCLoss (as TorchRL's) reads as class indices and scores with a cross-entropy
    of the sampled action instead of the policy's log-likelihood; cast to float, they get the
    log-likelihood of the categorical policy."""

    class OneHotBCLoss(base):  # type: ignore[misc,valid-type]
        def forward(self, tensordict: Any) -> Any:
            key = self.tensor_keys.action
            action = tensordict.get(key)
            if not action.is_floating_point():
                tensordict = tensordict.copy().set(key, action.float())
            return super().forward(tensordict)

    return OneHotBCLoss


def _needs(name: str, algorithm: str) -> Any:
    import tdrl.objectives as objectives

    cls = getattr(objectives, name, None)
    if cls is None:
        raise ImportError(
            f"{algorithm}: this tdrl has no tdrl.objectives.{name} (got none; expected the "
            f"offline losses of issue 24). Update tdrl."
        )
    return cls
