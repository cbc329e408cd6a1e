"""Collector arguments at their edge values, on the deterministic ``CountEnv``."""

from __future__ import annotations

from typing import Any

from ..registry import capture, scenario
from ._common import count_env, det_policy

MAX_BATCHES = 4


def collect(lib: Any, batch_size: tuple[int, ...] = (), horizon: int = 3, **kwargs: Any) -> Any:
    """Up to ``MAX_BATCHES`` batches of a ``Collector`` on ``CountEnv`` with the det. policy."""
    kwargs.setdefault("frames_per_batch", 4)
    kwargs.setdefault("total_frames", 12)
    env = count_env(lib, batch_size, horizon)
    collector = lib.collectors.Collector(env, det_policy(), **kwargs)
    batches = []
    try:
        for i, batch in enumerate(collector):
            batches.append(batch.clone())
            if i + 1 >= MAX_BATCHES:
                break
    finally:
        collector.shutdown()
    return {"n_batches": len(batches), "batches": batches}


def _edge(name: str, value: Any, **extra: Any) -> None:
    @scenario(f"collectors/{name}={value}")
    def _(lib: Any) -> Any:
        return collect(lib, **{name: value}, **extra)


for _value in (-1, 0, None, 2):
    _edge("max_frames_per_traj", _value, horizon=4)
_edge("total_frames", -1)
_edge("total_frames", 10)
_edge("total_frames", 3)
_edge("init_random_frames", 0)
_edge("init_random_frames", None)
_edge("reset_at_each_iter", True)
_edge("split_trajs", True)
_edge("split_trajs", False)
_edge("reset_when_done", True)
_edge("reset_when_done", False)
_edge("frames_per_batch", 0)
_edge("frames_per_batch", -1)


@scenario("collectors/frames_per_batch_non_multiple_of_env_batch")
def _(lib: Any) -> Any:
    return collect(lib, batch_size=(3,), frames_per_batch=10, total_frames=20)


@scenario("collectors/env_batch_2x2")
def _(lib: Any) -> Any:
    return collect(lib, batch_size=(2, 2), frames_per_batch=8, total_frames=16)


@scenario("collectors/batched_split_trajs")
def _(lib: Any) -> Any:
    return collect(lib, batch_size=(2,), frames_per_batch=8, total_frames=16, split_trajs=True)


@scenario("collectors/batched_max_frames_per_traj=2")
def _(lib: Any) -> Any:
    return collect(lib, batch_size=(2,), horizon=4, frames_per_batch=8, max_frames_per_traj=2)


@scenario("collectors/set_truncated=True")
def _(lib: Any) -> Any:
    return collect(lib, horizon=6, max_frames_per_traj=2, set_truncated=True)


@scenario("collectors/init_random_frames=4")
def _(lib: Any) -> Any:
    """Random actions (their values depend on each library's RNG use): compare which steps
    took the policy's action, and everything but the action values."""
    out = collect(lib, frames_per_batch=2, total_frames=8, init_random_frames=4)
    policy_steps = []
    for batch in out["batches"]:
        expected = det_policy()(batch.select("observation").clone())["action"]
        policy_steps.append((batch["action"] - expected).abs().lt(1e-6).all(-1))
        batch.exclude("action", ("next", "reward"), inplace=True)
    out["policy_steps"] = policy_steps
    return out


@scenario("collectors/len")
def _(lib: Any) -> Any:
    def length(**kwargs: Any) -> Any:
        env = count_env(lib)
        collector = lib.collectors.Collector(env, det_policy(), **kwargs)
        try:
            return capture(lambda: len(collector))
        finally:
            collector.shutdown()

    return {
        "12_by_4": length(frames_per_batch=4, total_frames=12),
        "10_by_4": length(frames_per_batch=4, total_frames=10),
        "unbounded": length(frames_per_batch=4, total_frames=-1),
    }


@scenario("collectors/policy=None")
def _(lib: Any) -> Any:
    env = count_env(lib, (2,))
    collector = lib.collectors.Collector(env, None, frames_per_batch=4, total_frames=4)
    try:
        batch = next(iter(collector)).clone()
    finally:
        collector.shutdown()
    action = batch["action"]
    batch.exclude("action", ("next", "reward"), inplace=True)
    return {"batch": batch, "in_bounds": bool(action.abs().le(1).all()), "shape": action.shape}


@scenario("collectors/exploration_type=DETERMINISTIC/ProbabilisticActor")
def _(lib: Any) -> Any:
    """A stochastic actor under the collector's exploration_type: deterministic means loc."""
    from tensordict.nn import TensorDictModule

    from ._common import LocScale

    net = TensorDictModule(
        LocScale(1, obs=1, act=1), in_keys=["observation"], out_keys=["loc", "scale"]
    )
    actor = lib.modules.ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=lib.modules.TanhNormal,
        spec=lib.data.Bounded(low=-1.0, high=1.0, shape=(1,)),
    )
    utils = lib.envs_utils
    env = count_env(lib)
    collector = lib.collectors.Collector(
        env,
        actor,
        frames_per_batch=4,
        total_frames=4,
        exploration_type=utils.ExplorationType.DETERMINISTIC,
    )
    try:
        batch = next(iter(collector)).clone()
    finally:
        collector.shutdown()
    return batch.exclude("loc", "scale")


@scenario("collectors/postproc")
def _(lib: Any) -> Any:
    def postproc(td: Any) -> Any:
        td["double_obs"] = td["observation"] * 2
        return td

    return collect(lib, postproc=postproc)


@scenario("collectors/reset_method")
def _(lib: Any) -> Any:
    env = count_env(lib)
    collector = lib.collectors.Collector(env, det_policy(), frames_per_batch=2, total_frames=-1)
    try:
        it = iter(collector)
        first = next(it).clone()
        collector.reset()
        second = next(it).clone()
    finally:
        collector.shutdown()
    return {"first": first, "after_reset": second}


@scenario("collectors/return_same_td=True")
def _(lib: Any) -> Any:
    env = count_env(lib)
    collector = lib.collectors.Collector(
        env, det_policy(), frames_per_batch=2, total_frames=6, return_same_td=True
    )
    try:
        batches = list(collector)
        same = all(b is batches[0] for b in batches)
        last = batches[-1].clone()
    finally:
        collector.shutdown()
    return {"same_object": same, "last": last, "n": len(batches)}


@scenario("collectors/total_frames_non_multiple_batched")
def _(lib: Any) -> Any:
    return collect(lib, batch_size=(2,), frames_per_batch=4, total_frames=10)


@scenario("collectors/init_random_frames=3_non_multiple")
def _(lib: Any) -> Any:
    out = collect(lib, frames_per_batch=2, total_frames=8, init_random_frames=3)
    policy_steps = []
    for batch in out["batches"]:
        expected = det_policy()(batch.select("observation").clone())["action"]
        policy_steps.append((batch["action"] - expected).abs().lt(1e-6).all(-1))
        batch.exclude("action", ("next", "reward"), inplace=True)
    out["policy_steps"] = policy_steps
    return out


@scenario("collectors/split_trajs_with_max_frames_per_traj")
def _(lib: Any) -> Any:
    return collect(lib, horizon=5, frames_per_batch=6, max_frames_per_traj=2, split_trajs=True)


@scenario("collectors/MultiSyncCollector/two_workers", slow=True)
def _(lib: Any) -> Any:
    from ._common import count_env_factory

    make = count_env_factory(lib.name)
    collector = lib.collectors.MultiSyncCollector(
        [make, make], det_policy(), frames_per_batch=8, total_frames=16, cat_results="stack"
    )
    batches = []
    try:
        for batch in collector:
            batches.append(batch.clone())
    finally:
        collector.shutdown()
    return {"n_batches": len(batches), "batches": batches}
