"""Actors inside and outside exploration blocks: what they write and which action they take."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import distributions as D

from ..registry import capture, scenario
from ._common import LocScale, mlp, rand

MODES = ("outside", "DETERMINISTIC", "MODE", "MEAN", "RANDOM")
BATCH = 5


def _block(lib: Any, mode: str) -> Any:
    if mode == "outside":
        return nullcontext()
    utils = lib.envs_utils
    return utils.set_exploration_type(getattr(utils.ExplorationType, mode))


def _obs() -> TensorDict:
    return TensorDict({"observation": rand(BATCH, 3, seed=7)}, [BATCH])


def _run_modes(lib: Any, actor: Any, action_key: str = "action") -> Any:
    out: dict[str, Any] = {}
    reference = None
    for mode in MODES:
        torch.manual_seed(0)

        def call(mode: str = mode) -> Any:
            with _block(lib, mode):
                return actor(_obs())

        td = capture(call)
        if isinstance(td, Exception) or mode != "RANDOM":
            out[mode] = td
            if mode == "DETERMINISTIC" and not isinstance(td, Exception):
                reference = td.get(action_key)
            continue
        # random actions: their values depend on each library's sampling code
        action = td.get(action_key)
        out[mode] = {
            "keys": sorted(map(str, td.keys(True, True))),
            "action_shape": list(action.shape),
            "action_dtype": str(action.dtype),
            "differs_from_deterministic": None
            if reference is None
            else bool((action != reference).any()),
        }
    return out


def _continuous(lib: Any, dist: str, **kwargs: Any) -> Any:
    # plain torch loc/scale: NormalParamExtractor has its own scenario
    net = TensorDictModule(LocScale(1), in_keys=["observation"], out_keys=["loc", "scale"])
    cls = {"Normal": D.Normal, "TanhNormal": lib.modules.TanhNormal}[dist]
    spec = lib.data.Bounded(low=-1.0, high=1.0, shape=(2,))
    return lib.modules.ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=cls,
        spec=spec,
        **kwargs,
    )


def _discrete(lib: Any, dist: str, **kwargs: Any) -> Any:
    net = TensorDictModule(mlp([3, 8, 4], seed=2), in_keys=["observation"], out_keys=["logits"])
    cls = {"Categorical": D.Categorical, "OneHotCategorical": lib.modules.OneHotCategorical}[dist]
    spec = lib.data.Categorical(4) if dist == "Categorical" else lib.data.OneHot(4)
    return lib.modules.ProbabilisticActor(
        net, in_keys=["logits"], distribution_class=cls, spec=spec, **kwargs
    )


for _dist in ("Normal", "TanhNormal"):
    for _log_prob in (False, True):

        def _make_c(dist: str = _dist, log_prob: bool = _log_prob) -> None:
            @scenario(f"actors/ProbabilisticActor/{dist}/return_log_prob={log_prob}")
            def _(lib: Any) -> Any:
                return _run_modes(lib, _continuous(lib, dist, return_log_prob=log_prob))

        _make_c()

for _dist in ("Categorical", "OneHotCategorical"):
    for _log_prob in (False, True):

        def _make_d(dist: str = _dist, log_prob: bool = _log_prob) -> None:
            @scenario(f"actors/ProbabilisticActor/{dist}/return_log_prob={log_prob}")
            def _(lib: Any) -> Any:
                return _run_modes(lib, _discrete(lib, dist, return_log_prob=log_prob))

        _make_d()


@scenario("actors/ProbabilisticActor/default_interaction_type=RANDOM")
def _(lib: Any) -> Any:
    utils = lib.envs_utils
    actor = _continuous(lib, "Normal", default_interaction_type=utils.ExplorationType.RANDOM)
    return _run_modes(lib, actor)


@scenario("actors/ProbabilisticActor/TanhNormal/get_dist")
def _(lib: Any) -> Any:
    actor = _continuous(lib, "TanhNormal")
    td = actor(_obs())
    dist = actor.get_dist(td)
    action = td["action"].clamp(-0.99, 0.99)
    return {
        "log_prob": dist.log_prob(action),
        "mean": capture(lambda: dist.mean),
        "mode": capture(lambda: dist.mode),
        "deterministic_sample": capture(lambda: dist.deterministic_sample),
    }


def _qvalue(lib: Any, spec_kind: str, **kwargs: Any) -> Any:
    spec = lib.data.OneHot(4) if spec_kind == "OneHot" else lib.data.Categorical(4)
    return lib.modules.QValueActor(
        mlp([3, 8, 4], seed=3), in_keys=["observation"], spec=spec, **kwargs
    )


@scenario("actors/QValueActor/OneHot")
def _(lib: Any) -> Any:
    return _run_modes(lib, _qvalue(lib, "OneHot"))


@scenario("actors/QValueActor/Categorical")
def _(lib: Any) -> Any:
    return _run_modes(lib, _qvalue(lib, "Categorical"))


@scenario("actors/QValueActor/no_spec")
def _(lib: Any) -> Any:
    actor = lib.modules.QValueActor(mlp([3, 8, 4], seed=3), in_keys=["observation"])
    return actor(_obs())


def _egreedy(lib: Any, eps: float, spec_kind: str) -> Any:
    actor = _qvalue(lib, spec_kind)
    spec = actor.spec if hasattr(actor, "spec") else None
    greedy_spec = lib.data.OneHot(4) if spec_kind == "OneHot" else lib.data.Categorical(4)
    explore = lib.modules.EGreedyModule(spec=greedy_spec, eps_init=eps, eps_end=eps)
    policy = TensorDictSequential(actor, explore)
    out: dict[str, Any] = {"actor_spec": spec}
    obs = TensorDict({"observation": rand(64, 3, seed=8)}, [64])
    greedy = actor(obs.clone())["action"]
    for mode in MODES:

        def call(mode: str = mode) -> Any:
            with _block(lib, mode):
                action = policy(obs.clone())["action"]
            return {
                "all_greedy": bool((action == greedy).all()),
                "in_spec": bool(greedy_spec.is_in(action)),
                "shape": list(action.shape),
            }

        out[mode] = capture(call)
    return out


for _eps in (0.0, 1.0):
    for _kind in ("OneHot", "Categorical"):

        def _make_e(eps: float = _eps, kind: str = _kind) -> None:
            @scenario(f"actors/EGreedyModule/eps={eps}/{kind}")
            def _(lib: Any) -> Any:
                return _egreedy(lib, eps, kind)

        _make_e()


@scenario("actors/EGreedyModule/step")
def _(lib: Any) -> Any:
    explore = lib.modules.EGreedyModule(
        spec=lib.data.OneHot(4), eps_init=1.0, eps_end=0.1, annealing_num_steps=10
    )
    values = [float(explore.eps)]
    for frames in (1, 4, 100):
        explore.step(frames)
        values.append(float(explore.eps))
    return values


@scenario("actors/AdditiveGaussianModule/modes")
def _(lib: Any) -> Any:
    spec = lib.data.Bounded(low=-1.0, high=1.0, shape=(2,))
    actor = TensorDictModule(mlp([3, 8, 2], seed=4), in_keys=["observation"], out_keys=["action"])
    noise = lib.modules.AdditiveGaussianModule(spec=spec, sigma_init=0.5, sigma_end=0.5)
    policy = TensorDictSequential(actor, noise)
    base = actor(_obs())["action"]
    out = {}
    for mode in MODES:

        def call(mode: str = mode) -> Any:
            with _block(lib, mode):
                action = policy(_obs())["action"]
            return {
                "noisy": bool((action != base.clamp(-1, 1)).any()),
                "in_bounds": bool(action.abs().le(1).all()),
            }

        out[mode] = capture(call)
    return out


@scenario("actors/NormalParamExtractor/default")
def _(lib: Any) -> Any:
    x = torch.linspace(-3.0, 3.0, 8).reshape(2, 4)
    return lib.modules.NormalParamExtractor()(x)


@scenario("actors/NormalParamExtractor/scale_mapping=exp")
def _(lib: Any) -> Any:
    x = torch.linspace(-3.0, 3.0, 8).reshape(2, 4)
    return capture(lambda: lib.modules.NormalParamExtractor(scale_mapping="exp")(x))


@scenario("actors/NormalParamExtractor/scale_lb")
def _(lib: Any) -> Any:
    x = torch.linspace(-30.0, 3.0, 8).reshape(2, 4)
    return capture(lambda: lib.modules.NormalParamExtractor(scale_lb=0.5)(x))
