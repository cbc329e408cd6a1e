"""Agent groups of a multi-agent env, and the per-group networks of the multi-agent presets.

A multi-agent env keeps each group's entries under the group's name: ``(group, "observation")``
``[*B, n_agents, obs_dim]``, ``(group, "action")``, ``(group, "reward")`` ``[*B, n_agents, 1]``
and, for some envs, ``(group, "done"/"terminated")`` and ``(group, "action_mask")``.
:func:`find_groups` reads that layout from the specs once and refuses what the presets cannot
train; the builders below make one network (or loss) per group, on the group's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from tensordict.utils import NestedKey
from torch import nn

from tdrl.envs import EnvBase
from tdrl.modules import (
    EGreedyModule,
    MaskedCategorical,
    MaskedOneHotCategorical,
    MultiAgentMLP,
    NormalParamExtractor,
    OneHotCategorical,
    ProbabilisticActor,
    QMixer,
    QValueActor,
    TanhNormal,
)
from tdrl.objectives import ClipPPOLoss, QMixerLoss
from tdrl.specs import Bounded, Categorical, OneHot, TensorSpec
from tdrl.train._builders import activation_class

__all__ = ["TEAM", "Group", "find_groups", "make_ppo_loss", "make_qmix_loss"]

TEAM = "team"  # root entry of per-group team values: (TEAM, group, "reward"), ...


@dataclass(frozen=True)
class Group:
    """One group of agents that share their specs (and, in the presets, their networks).

    Attributes:
        name: the group's key.
        n_agents: agents in the group.
        obs_dim: features of one agent's ``(name, "observation")``.
        action_spec: the unbatched spec of ``(name, "action")`` (leading dim ``n_agents``).
        own_done: whether the group has its own ``done``/``terminated`` entries (else the
            root's apply to it).
        mask: whether the group has an ``(name, "action_mask")`` entry.
    """

    name: str
    n_agents: int
    obs_dim: int
    action_spec: TensorSpec
    own_done: bool
    mask: bool

    def key(self, leaf: str) -> tuple[str, str]:
        """The group's entry ``(name, leaf)``."""
        return (self.name, leaf)

    @property
    def discrete(self) -> bool:
        """Whether the actions are indices (``Categorical``) or one-hot (``OneHot``)."""
        return isinstance(self.action_spec, Categorical | OneHot)

    @property
    def n_actions(self) -> int:
        """Actions per agent (discrete) or the action's size (continuous)."""
        spec = self.action_spec
        return int(spec.n) if self.discrete else int(spec.shape[-1])  # type: ignore[attr-defined]


def _refuse(where: str, what: str, fix: str) -> ValueError:
    return ValueError(f"{where}: {what}. {fix}.")


def find_groups(env: EnvBase, where: str) -> list[Group]:
    """The agent groups of ``env``, checked for the multi-agent presets.

    Raises:
        ValueError: the env has a root action (a single-agent env), a group without a flat
            per-agent observation or a reward, an action that is neither ``Bounded``,
            ``Categorical`` nor ``OneHot``, or no root ``"done"``.

    Examples:
        >>> from tdrl.envs import MultiAgentNavigationEnv
        >>> [(g.name, g.n_agents, g.obs_dim) for g in find_groups(MultiAgentNavigationEnv(),
        ...                                                      "example")]
        [('agents', 3, 4)]
    """
    keys = [k if isinstance(k, tuple) else (k,) for k in env.action_keys]
    if any(len(k) != 2 or k[1] != "action" for k in keys):
        raise _refuse(
            where,
            f"the env's actions are not one entry per agent group (got action keys {keys}; "
            "expected ('<group>', 'action') for every group)",
            "Train single-agent envs with the ppo, a2c, dqn, sac, td3 or ddpg presets",
        )
    if "done" not in env.full_done_spec.keys():
        raise _refuse(
            where,
            f"the env has no root 'done' (got done keys {env.done_keys}; expected a root "
            "'done' that ends an episode for every group)",
            "Wrap the env so that it reports a root done",
        )
    names = [k[0] for k in keys]
    if TEAM in names:
        raise _refuse(
            where,
            f"a group is named {TEAM!r} (got groups {names}; expected no group named like the "
            "root entry of the per-group team values)",
            "Rename the group with the env's group_map option",
        )
    return [_group(env, name, where) for name in names]


def _group(env: EnvBase, name: str, where: str) -> Group:
    obs = env.full_observation_spec.get((name, "observation"), None)
    batch = len(env.batch_size)
    if not isinstance(obs, TensorSpec) or obs.ndim != batch + 2:  # type: ignore[attr-defined]
        raise _refuse(
            where,
            f"group {name!r} has no flat per-agent observation (got {obs!r} at ({name!r}, "
            "'observation'); expected a tensor spec [*batch, n_agents, features])",
            "Flatten the observation with a transform, or pick an env with vector observations",
        )
    if (name, "reward") not in env.full_reward_spec.keys(True, True):
        raise _refuse(
            where,
            f"group {name!r} has no reward (got reward keys {env.reward_keys}; expected "
            f"({name!r}, 'reward'))",
            "Pick an env with one reward entry per group",
        )
    spec = env.full_action_spec_unbatched[name, "action"]
    if not isinstance(spec, Bounded | Categorical | OneHot):
        raise _refuse(
            where,
            f"group {name!r} has a {type(spec).__name__} action (got {spec!r}; expected "
            "Bounded, Categorical or OneHot)",
            "Use an env option for one continuous or discrete action per agent",
        )
    own_done = (name, "done") in env.full_done_spec.keys(True, True)
    mask = (name, "action_mask") in env.full_observation_spec.keys(True, True)
    n_agents, obs_dim = int(obs.shape[-2]), int(obs.shape[-1])
    return Group(name, n_agents, obs_dim, spec, own_done, mask)


def _mlp(group: Group, n_out: int, model: dict[str, Any], *, centralized: bool) -> MultiAgentMLP:
    return MultiAgentMLP(
        group.obs_dim,
        n_out,
        group.n_agents,
        centralized=centralized,
        share_params=bool(model.get("share_params", True)),
        num_cells=list(model.get("hidden", [64, 64])),
        activation_class=activation_class(model.get("activation", "tanh")),
    )


@torch.no_grad()
def _small_last_layer(net: MultiAgentMLP) -> None:
    """Scales the last layer down so that the initial policy is close to uniform (or 0 mean)."""
    last = [p for name, p in net.named_parameters() if name.endswith("weight")][-1]
    last.mul_(0.01)


def make_actor(group: Group, model: dict[str, Any]) -> ProbabilisticActor:
    """The group's stochastic policy: one network for every agent (``share_params``), a
    tanh-normal for ``Bounded`` actions, a (masked) categorical for discrete ones; the
    log-probability goes to ``(group, "action_log_prob")``."""
    g = group
    if not g.discrete:
        net = _mlp(g, 2 * g.n_actions, model, centralized=False)
        _small_last_layer(net)
        params = TensorDictModule(
            nn.Sequential(net, NormalParamExtractor()), [g.key("observation")],
            [g.key("loc"), g.key("scale")],
        )  # fmt: skip
        return ProbabilisticActor(
            params,
            {"loc": g.key("loc"), "scale": g.key("scale")},
            out_keys=[g.key("action")],
            distribution_class=TanhNormal,
            spec=g.action_spec,
            return_log_prob=True,
        )
    net = _mlp(g, g.n_actions, model, centralized=False)
    _small_last_layer(net)
    in_keys: dict[str, NestedKey] = {"logits": g.key("logits")}
    index = isinstance(g.action_spec, Categorical)
    dist: type
    if g.mask:
        in_keys["mask"] = g.key("action_mask")
        dist = MaskedCategorical if index else MaskedOneHotCategorical
    else:
        dist = torch.distributions.Categorical if index else OneHotCategorical
    return ProbabilisticActor(
        TensorDictModule(net, [g.key("observation")], [g.key("logits")]),
        in_keys,
        out_keys=[g.key("action")],
        distribution_class=dist,
        spec=g.action_spec,
        return_log_prob=True,
    )


def make_ppo_loss(group: Group, config: dict[str, Any], *, centralized: bool) -> ClipPPOLoss:
    """MAPPO (``centralized``: the critic sees every agent of the group) or IPPO for a group,
    with its value estimator (GAE) on the group's keys."""
    g, lc, model = group, config["loss"], config.get("model", {})
    critic = TensorDictModule(
        _mlp(g, 1, model, centralized=centralized),
        [g.key("observation")],
        [g.key("state_value")],
    )
    entropy = float(lc.get("entropy_coef", 0.0))
    loss = ClipPPOLoss(
        make_actor(g, model),
        critic,
        clip_epsilon=float(lc.get("clip_epsilon", 0.2)),
        entropy_bonus=entropy > 0,
        entropy_coeff=entropy,
        critic_coeff=float(lc.get("critic_coef", 0.5)),
        loss_critic_type=str(lc.get("loss_critic_type", "l2")),
        normalize_advantage=bool(lc.get("normalize_advantage", True)),
    )
    done = (g.key("done"), g.key("terminated")) if g.own_done else ("done", "terminated")
    loss.set_keys(
        action=g.key("action"),
        sample_log_prob=g.key("action_log_prob"),
        value=g.key("state_value"),
        advantage=g.key("advantage"),
        value_target=g.key("value_target"),
        reward=g.key("reward"),
        done=done[0],
        terminated=done[1],
    )
    loss.make_value_estimator("GAE", gamma=float(lc["gamma"]), lmbda=float(lc["lmbda"]))
    return loss


def make_qmix_loss(
    group: Group, config: dict[str, Any], state_key: NestedKey | None, state_shape: Any
) -> tuple[QMixerLoss, EGreedyModule]:
    """QMIX for a group: a shared per-agent Q-network (greedy ``QValueActor``), a ``QMixer``
    on ``state_key`` (the group's observations when None) and e-greedy exploration."""
    g, lc, ec, model = group, config["loss"], config["exploration"], config.get("model", {})
    if not g.discrete:
        raise _refuse(
            "tdrl train qmix",
            f"group {g.name!r} has continuous actions (got {g.action_spec!r}; expected "
            "Categorical or OneHot)",
            "Build the env with discrete actions (env_options.continuous_actions=false)",
        )
    mask = g.key("action_mask") if g.mask else None
    # The action space by name, not the spec: QValueActor reads a categorical spec of shape
    # (1,) as one action with a trailing dim, while here it is a group of one agent.
    space = "categorical" if isinstance(g.action_spec, Categorical) else "one_hot"
    qnet = QValueActor(
        _mlp(g, g.n_actions, model, centralized=False),
        [g.key("observation")],
        action_space=space,
        action_value_key=g.key("action_value"),
        action_key=g.key("action"),
        chosen_action_value_key=g.key("chosen_action_value"),
        action_mask_key=mask,
    )
    if state_key is None:
        state_key, state_shape = g.key("observation"), (g.n_agents, g.obs_dim)
    mixer = TensorDictModule(
        QMixer(state_shape, int(model.get("mixing_embed_dim", 32)), g.n_agents),
        [g.key("chosen_action_value"), state_key],
        [(TEAM, g.name, "chosen_action_value")],
    )
    loss = QMixerLoss(
        qnet, mixer, loss_function=str(lc.get("loss_function", "l2")), action_space=g.action_spec
    )
    loss.set_keys(
        action_value=g.key("action_value"),
        local_value=g.key("chosen_action_value"),
        action=g.key("action"),
        global_value=(TEAM, g.name, "chosen_action_value"),
        reward=(TEAM, g.name, "reward"),
        priority=(TEAM, g.name, "td_error"),
        done="done",
        terminated="terminated",
    )
    loss.make_value_estimator("TD0", gamma=float(lc["gamma"]))
    greedy = EGreedyModule(
        g.action_spec,
        float(ec.get("eps_init", 1.0)),
        eps_end=float(ec.get("eps_end", 0.05)),
        annealing_num_steps=int(ec.get("annealing_frames", 10_000)),
        action_key=g.key("action"),
        action_mask_key=mask,
    )
    return loss, greedy
