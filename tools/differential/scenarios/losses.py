"""Loss outputs on the same weights and data.

Networks are plain torch modules with seeded weights (identical in both libraries); after a loss
is built, every parameter it holds (``loss.<network>_params``, ensembles included) is
overwritten with seeded values, and each target copy too when it does not share memory with the
live parameters. The data is seeded. Randomness a loss draws (SAC's actions) is drawn after the
same ``torch.manual_seed``; scenarios whose values would depend on each library's sampling code
record shapes and keys only.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import distributions as D
from torch import nn

from ..registry import capture, scenario
from ._common import LocScale, fill_, mlp, rand

B, OBS, ACT, N = 6, 3, 2, 4
NETWORKS = ("actor_network", "qvalue_network", "value_network", "critic_network")


class QNet(nn.Module):
    """``Q(obs, action)`` from a plain MLP on their concatenation."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.net = mlp([OBS + ACT, 8, 1], seed=seed)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], -1))


def data(discrete: bool = False) -> TensorDict:
    done = torch.tensor([False, False, True, False, False, True]).unsqueeze(-1)
    if discrete:
        index = torch.tensor([0, 1, 2, 3, 1, 0])
        action = nn.functional.one_hot(index, N)
    else:
        action = rand(B, ACT, seed=12).tanh() * 0.9
    return TensorDict(
        {
            "observation": rand(B, OBS, seed=10),
            "action": action,
            "next": {
                "observation": rand(B, OBS, seed=11),
                "reward": rand(B, 1, seed=13),
                "done": done,
                "terminated": done.clone(),
                "truncated": torch.zeros_like(done),
            },
        },
        [B],
    )


def set_weights(loss: Any) -> dict[str, Any]:
    """Seeded values in every live and target parameter set; which targets are copies."""
    separate = {}
    for i, name in enumerate(NETWORKS):
        live = getattr(loss, f"{name}_params", None) if _has(loss, name) else None
        if live is None:
            continue
        fill_(live, 100 + i)
        target = capture(lambda name=name: getattr(loss, f"target_{name}_params"))
        if isinstance(target, Exception) or target is None:
            separate[name] = None
            continue
        shared = _shares(live, target)
        separate[name] = not shared
        if not shared:
            fill_(target, 200 + i)
    return separate


def _has(loss: Any, name: str) -> bool:
    try:
        return getattr(loss, f"{name}_params", None) is not None
    except Exception:
        return False


def _shares(live: Any, target: Any) -> bool:
    a = [live.get(k) for k in live.keys(True, True)]
    b = [target.get(k) for k in target.keys(True, True)]
    return len(a) == len(b) and all(x.data_ptr() == y.data_ptr() for x, y in zip(a, b))


def evaluate(loss: Any, td: TensorDict, values: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"separate_targets": set_weights(loss)}
    torch.manual_seed(1)
    result = capture(lambda: loss(td))
    if isinstance(result, Exception) or values:
        out["loss"] = result if isinstance(result, Exception) else result.detach()
    else:
        out["loss_keys"] = sorted(result.keys())
    out["td_error"] = td.get("td_error", None)
    if out["td_error"] is not None and not values:
        out["td_error"] = list(out["td_error"].shape)
    out["input_keys_after"] = sorted(map(str, td.keys(True, True)))
    return out


def qvalue_actor(lib: Any) -> Any:
    return lib.modules.QValueActor(
        mlp([OBS, 8, N], seed=3), in_keys=["observation"], spec=lib.data.OneHot(N)
    )


def qnet(lib: Any, seed: int) -> Any:
    return lib.modules.ValueOperator(QNet(seed), in_keys=["observation", "action"])


def vnet(lib: Any, seed: int) -> Any:
    return lib.modules.ValueOperator(mlp([OBS, 8, 1], seed=seed), in_keys=["observation"])


def det_actor(lib: Any) -> Any:
    net = nn.Sequential(mlp([OBS, 8, ACT], seed=4), nn.Tanh())
    spec = lib.data.Bounded(low=-1.0, high=1.0, shape=(ACT,))
    return lib.modules.Actor(net, in_keys=["observation"], spec=spec)


def prob_actor(lib: Any, dist: str = "TanhNormal", fixed_scale: float | None = None) -> Any:
    net = TensorDictModule(
        LocScale(5, fixed_scale), in_keys=["observation"], out_keys=["loc", "scale"]
    )
    cls = {
        "Normal": D.Normal,
        "TanhNormal": lib.modules.TanhNormal,
        "IndependentNormal": lib.modules.IndependentNormal,
    }[dist]
    return lib.modules.ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=cls,
        spec=lib.data.Bounded(low=-1.0, high=1.0, shape=(ACT,)),
        return_log_prob=True,
    )


def discrete_actor(lib: Any) -> Any:
    net = TensorDictModule(mlp([OBS, 8, N], seed=6), in_keys=["observation"], out_keys=["logits"])
    return lib.modules.ProbabilisticActor(
        net,
        in_keys=["logits"],
        distribution_class=lib.modules.OneHotCategorical,
        spec=lib.data.OneHot(N),
        return_log_prob=True,
    )


# ---------------------------------------------------------------- DQN


@scenario("losses/DQNLoss/default")
def _(lib: Any) -> Any:
    loss = lib.objectives.DQNLoss(qvalue_actor(lib), action_space="one_hot")
    return evaluate(loss, data(discrete=True))


@scenario("losses/DQNLoss/double_smooth_l1_gamma0.9")
def _(lib: Any) -> Any:
    loss = lib.objectives.DQNLoss(
        qvalue_actor(lib), action_space="one_hot", double_dqn=True, loss_function="smooth_l1"
    )
    loss.make_value_estimator(gamma=0.9)
    return evaluate(loss, data(discrete=True))


@scenario("losses/DQNLoss/no_action_space")
def _(lib: Any) -> Any:
    loss = lib.objectives.DQNLoss(
        lib.modules.QValueActor(
            mlp([OBS, 8, N], seed=3), in_keys=["observation"], spec=lib.data.OneHot(N)
        )
    )
    return evaluate(loss, data(discrete=True))


@scenario("losses/DiscreteCQLLoss/default")
def _(lib: Any) -> Any:
    loss = lib.objectives.DiscreteCQLLoss(qvalue_actor(lib), action_space="one_hot")
    return evaluate(loss, data(discrete=True))


# ---------------------------------------------------------------- deterministic actor-critic


@scenario("losses/DDPGLoss/default")
def _(lib: Any) -> Any:
    loss = lib.objectives.DDPGLoss(det_actor(lib), qnet(lib, 7))
    return evaluate(loss, data())


@scenario("losses/DDPGLoss/delay_actor_gamma0.9")
def _(lib: Any) -> Any:
    loss = lib.objectives.DDPGLoss(det_actor(lib), qnet(lib, 7), delay_actor=True)
    loss.make_value_estimator(gamma=0.9)
    return evaluate(loss, data())


@scenario("losses/TD3Loss/no_noise")
def _(lib: Any) -> Any:
    loss = lib.objectives.TD3Loss(
        det_actor(lib),
        qnet(lib, 7),
        action_spec=lib.data.Bounded(low=-1.0, high=1.0, shape=(ACT,)),
        policy_noise=0.0,
    )
    return evaluate(loss, data())


@scenario("losses/TD3Loss/default_noise")
def _(lib: Any) -> Any:
    loss = lib.objectives.TD3Loss(
        det_actor(lib), qnet(lib, 7), action_spec=lib.data.Bounded(low=-1.0, high=1.0, shape=(ACT,))
    )
    return evaluate(loss, data(), values=False)


# ---------------------------------------------------------------- stochastic actor-critic


@scenario("losses/SACLoss/default")
def _(lib: Any) -> Any:
    loss = lib.objectives.SACLoss(prob_actor(lib), qnet(lib, 7))
    return evaluate(loss, data())


@scenario("losses/SACLoss/keys")
def _(lib: Any) -> Any:
    loss = lib.objectives.SACLoss(prob_actor(lib), qnet(lib, 7))
    out = evaluate(loss, data(), values=False)
    out["target_entropy"] = capture(lambda: float(loss.target_entropy))
    return out


@scenario("losses/SACLoss/near_deterministic")
def _(lib: Any) -> Any:
    """Tiny fixed scale and alpha: the sampled actions are tanh(loc) up to 1e-6, the entropy
    terms vanish, so the Q and actor losses are deterministic whatever RNG order a library uses."""
    actor = prob_actor(lib, fixed_scale=1e-6)
    loss = lib.objectives.SACLoss(actor, qnet(lib, 7), alpha_init=1e-9, fixed_alpha=True)
    out = evaluate(loss, data())
    if not isinstance(out["loss"], Exception):
        out["loss"] = out["loss"].select("loss_qvalue", "loss_actor", strict=False)
    return out


@scenario("losses/DiscreteSACLoss/default")
def _(lib: Any) -> Any:
    qvalue = TensorDictModule(
        mlp([OBS, 8, N], seed=8), in_keys=["observation"], out_keys=["action_value"]
    )
    loss = lib.objectives.DiscreteSACLoss(
        discrete_actor(lib), qvalue, num_actions=N, action_space="one-hot"
    )
    return evaluate(loss, data(discrete=True))


@scenario("losses/IQLLoss/default")
def _(lib: Any) -> Any:
    loss = lib.objectives.IQLLoss(prob_actor(lib), qnet(lib, 7), vnet(lib, 9))
    return evaluate(loss, data())


@scenario("losses/IQLLoss/expectile0.8")
def _(lib: Any) -> Any:
    loss = lib.objectives.IQLLoss(prob_actor(lib), qnet(lib, 7), vnet(lib, 9), expectile=0.8)
    return evaluate(loss, data())


@scenario("losses/CQLLoss/default")
def _(lib: Any) -> Any:
    loss = lib.objectives.CQLLoss(
        prob_actor(lib),
        qnet(lib, 7),
        action_spec=lib.data.Bounded(low=-1.0, high=1.0, shape=(ACT,)),
    )
    return evaluate(loss, data(), values=False)


# ---------------------------------------------------------------- policy gradient


def pg_data(lib: Any, actor: Any, with_advantage: bool) -> TensorDict:
    td = data()
    with torch.no_grad():
        # the behaviour policy's parameters (KLPEN rebuilds its distribution from them)
        loc, scale = LocScale(5)(td["observation"])
        td["loc"], td["scale"] = loc + 0.05, scale * 1.1
        dist = actor.get_dist(td.clone())
        td["sample_log_prob"] = dist.log_prob(td["action"])
        td["action_log_prob"] = td["sample_log_prob"].clone()
    if with_advantage:
        td["advantage"] = rand(B, 1, seed=14)
        td["value_target"] = rand(B, 1, seed=15)
    return td


def _pg(lib: Any, cls: str, with_advantage: bool, **kwargs: Any) -> Any:
    actor = prob_actor(lib, "IndependentNormal")
    loss = getattr(lib.objectives, cls)(actor, vnet(lib, 9), **kwargs)
    out = {"log_prob_key": capture(lambda: str(loss.tensor_keys.sample_log_prob))}
    out.update(evaluate(loss, pg_data(lib, actor, with_advantage)))
    return out


for _cls in ("ClipPPOLoss", "PPOLoss", "KLPENPPOLoss", "A2CLoss"):
    for _adv in (True, False):

        def _make(cls: str = _cls, adv: bool = _adv) -> None:
            @scenario(f"losses/{cls}/{'given_advantage' if adv else 'computed_advantage'}")
            def _(lib: Any) -> Any:
                return _pg(lib, cls, adv)

        _make()


@scenario("losses/ClipPPOLoss/options")
def _(lib: Any) -> Any:
    return _pg(
        lib,
        "ClipPPOLoss",
        True,
        clip_epsilon=0.1,
        entropy_coeff=0.05,
        critic_coeff=0.5,
        loss_critic_type="l2",
        normalize_advantage=True,
    )


@scenario("losses/ClipPPOLoss/clip_value")
def _(lib: Any) -> Any:
    actor = prob_actor(lib, "IndependentNormal")
    loss = lib.objectives.ClipPPOLoss(actor, vnet(lib, 9), clip_value=0.1)
    td = pg_data(lib, actor, True)
    td["state_value"] = rand(B, 1, seed=16)
    return evaluate(loss, td)


# ---------------------------------------------------------------- more losses, target updates


@scenario("losses/ReinforceLoss/default")
def _(lib: Any) -> Any:
    actor = prob_actor(lib, "IndependentNormal")
    loss = lib.objectives.ReinforceLoss(actor, critic_network=vnet(lib, 9))
    return evaluate(loss, pg_data(lib, actor, True))


@scenario("losses/DiscreteIQLLoss/default")
def _(lib: Any) -> Any:
    qvalue = TensorDictModule(
        mlp([OBS, 8, N], seed=8), in_keys=["observation"], out_keys=["state_action_value"]
    )
    loss = lib.objectives.DiscreteIQLLoss(
        discrete_actor(lib), qvalue, vnet(lib, 9), action_space="one-hot"
    )
    return evaluate(loss, data(discrete=True))


def _target_trace(lib: Any, make_updater: Any, steps: int = 4) -> Any:
    """The first target leaf after each updater step, the live weights moving in between."""
    loss = lib.objectives.DQNLoss(qvalue_actor(lib), action_space="one_hot")
    set_weights(loss)
    updater = make_updater(loss)
    live, target = loss.value_network_params, loss.target_value_network_params
    key = next(iter(live.keys(True, True)))
    trace = []
    for i in range(steps):
        with torch.no_grad():
            live.get(key).data.add_(1.0 + i)
        updater.step()
        trace.append(target.get(key).flatten()[:3].clone())
    return trace


@scenario("losses/SoftUpdate/eps0.75")
def _(lib: Any) -> Any:
    return _target_trace(lib, lambda loss: lib.objectives.SoftUpdate(loss, eps=0.75))


@scenario("losses/SoftUpdate/tau0.1")
def _(lib: Any) -> Any:
    return _target_trace(lib, lambda loss: lib.objectives.SoftUpdate(loss, tau=0.1))


@scenario("losses/HardUpdate/interval2")
def _(lib: Any) -> Any:
    return _target_trace(
        lib, lambda loss: lib.objectives.HardUpdate(loss, value_network_update_interval=2)
    )
