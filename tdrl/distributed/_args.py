"""How :class:`RayCollector` reads TorchRL's arguments: env factories, collector classes,
per-collector values and the arguments tdrl cannot honour."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tdrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from tdrl.collectors._unsupported import check_supported
from tdrl.distributed._remote_config import actor_options
from tdrl.envs import EnvBase, EnvCreator

__all__ = [
    "actor_configs",
    "actor_kwargs",
    "check_interval",
    "check_max_restarts",
    "check_unsupported",
    "collector_class_of",
    "env_factories",
    "per_actor",
]

_NO_SCHEME = "RayCollector syncs weights through the Ray object store, with versions"
#: argument -> (accepted values, why other values are refused)
_UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "trust_policy": ((None, True), "tdrl never wraps or checks the policy"),
    "weight_updater": ((None,), _NO_SCHEME),
    "weight_sync_schemes": ((None,), _NO_SCHEME),
    "weight_recv_schemes": ((None,), _NO_SCHEME),
    "trajs_per_batch": (
        (None,),
        "tdrl collects fixed-length [*env.batch_size, T] batches, not whole trajectories",
    ),
}
# what RayCollector sets in the actors' collectors itself
_OWN_KWARGS = (
    "create_env_fn",
    "policy",
    "policy_factory",
    "frames_per_batch",
    "total_frames",
    "replay_buffer",
    "split_trajs",
    "postproc",
    "return_same_td",
    "num_workers",
)
_CLASSES = {"single": Collector, "sync": MultiSyncCollector, "async": MultiAsyncCollector}


def check_unsupported(owner: str, values: Mapping[str, Any]) -> None:
    """Raises ``ValueError`` for the first argument whose value tdrl cannot honour (the
    collectors' check with RayCollector's table).

    Examples:
        >>> check_unsupported("RayCollector.__init__", {"trajs_per_batch": None})
    """
    check_supported(owner, values, _UNSUPPORTED)


def check_interval(owner: str, interval: Any) -> int:
    """``max_weight_update_interval``: an int >= -1 (-1: no forced update).

    Examples:
        >>> check_interval("RayCollector.__init__", 2)
        2
    """
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < -1:
        raise ValueError(
            f"{owner}: max_weight_update_interval must be an int >= -1 (got {interval!r}; "
            "expected -1 for no forced update, or the batches an actor may collect after the "
            "one that brought its weights). Pass e.g. 2."
        )
    return interval


def collector_class_of(owner: str, collector_class: Any, workers: int) -> type:
    """The collector class each actor runs: tdrl's :class:`Collector` (``"single"``) or
    :class:`MultiSyncCollector` (``"sync"``, with ``workers`` processes).

    Examples:
        >>> collector_class_of("f", "sync", 2).__name__
        'MultiSyncCollector'
    """
    cls = (
        _CLASSES.get(collector_class, collector_class)
        if isinstance(collector_class, str)
        else (collector_class)
    )
    if cls is MultiAsyncCollector:
        raise ValueError(
            f"{owner}: collector_class=MultiAsyncCollector is not supported (got "
            f"{collector_class!r}; expected Collector or MultiSyncCollector): its batches would "
            "not say which policy weights collected them. Use more actors with sync=False."
        )
    if cls not in (Collector, MultiSyncCollector):
        raise TypeError(
            f"{owner}: collector_class must be Collector, MultiSyncCollector, 'single' or 'sync' "
            f"(got {collector_class!r}). Pass one of them."
        )
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(
            f"{owner}: num_workers_per_collector must be an int >= 1 (got {workers!r}; expected "
            "e.g. 2). Pass the number of worker processes each actor's collector runs."
        )
    if cls is Collector and workers != 1:
        raise ValueError(
            f"{owner}: num_workers_per_collector={workers} needs a multi-process collector (got "
            "collector_class=Collector; expected MultiSyncCollector). Pass "
            "collector_class=MultiSyncCollector."
        )
    return cls


def env_factories(
    owner: str, create_env_fn: Any, num_collectors: int | None, use_env_creator: bool
) -> list[Any]:
    """One env factory per actor (TorchRL's list, or one factory for ``num_collectors``)."""
    if isinstance(create_env_fn, (list, tuple)):
        fns = list(create_env_fn)
        if num_collectors is not None and num_collectors != len(fns):
            raise ValueError(
                f"{owner}: num_collectors does not match create_env_fn (got num_collectors="
                f"{num_collectors} and {len(fns)} env factories). Pass one of them."
            )
    else:
        n = 1 if num_collectors is None else num_collectors
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(
                f"{owner}: num_collectors must be an int >= 1 (got {n!r}; expected e.g. 2). "
                "Pass the number of collector actors."
            )
        fns = [create_env_fn] * n
    if not fns or not all(callable(f) and not isinstance(f, EnvBase) for f in fns):
        raise TypeError(
            f"{owner}: create_env_fn must be a callable returning an EnvBase, or a list of them "
            f"(got {create_env_fn!r}). Env instances cannot travel to the actors: pass e.g. "
            "lambda: GymEnv('CartPole-v1')."
        )
    return [EnvCreator(f) for f in fns] if use_env_creator else fns


def per_actor(owner: str, name: str, value: Any, n: int) -> list[Any]:
    """``value`` for each of ``n`` actors: a list of ``n`` values, or one value for all.

    Examples:
        >>> per_actor("f", "device", ["cpu", "cpu"], 2), per_actor("f", "device", None, 2)
        (['cpu', 'cpu'], [None, None])
    """
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(
                f"{owner}: {name} holds {len(value)} values (expected one per collector: {n}). "
                "Pass one value for all collectors or one per collector."
            )
        return list(value)
    return [value] * n


def check_max_restarts(owner: str, max_restarts: Any) -> None:
    """Raises ``ValueError`` unless ``max_restarts`` is an int >= 0.

    Examples:
        >>> check_max_restarts("f", 3)
    """
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise ValueError(
            f"{owner}: max_restarts must be an int >= 0 (got {max_restarts!r}). Pass e.g. 3."
        )


def actor_configs(owner: str, remote_configs: Any, n: int) -> list[dict[str, Any]]:
    """Each actor's Ray options (default: one CPU).

    Examples:
        >>> actor_configs("f", {"num_gpus": 1}, 2)
        [{'num_cpus': 1, 'num_gpus': 1}, {'num_cpus': 1, 'num_gpus': 1}]
    """
    return [
        actor_options(owner, "remote_configs", c, {"num_cpus": 1})
        for c in per_actor(owner, "remote_configs", remote_configs, n)
    ]


def actor_kwargs(
    owner: str,
    cls: type,
    sizes: tuple[int, int, int],
    settings: dict[str, Any],
    devices: dict[str, Any],
    collector_kwargs: Any,
) -> list[dict[str, Any]]:
    """The keyword arguments of each actor's collector.

    ``sizes`` is ``(actors, frames per actor batch, worker processes per actor)``; ``settings``
    holds the collector arguments RayCollector takes with TorchRL's conventions (-1 for None,
    ``init_random_frames`` over all actors); ``devices`` one device or one per actor; then
    ``collector_kwargs`` (a dict or one per actor) adds its own.
    """
    n, frames, workers = sizes
    common = dict(settings, frames_per_batch=frames, no_cuda_sync=bool(settings["no_cuda_sync"]))
    if common["max_frames_per_traj"] in (None, -1):
        common["max_frames_per_traj"] = None
    common["init_random_frames"] = -(-max(int(settings["init_random_frames"] or 0), 0) // n) or None
    if cls is not Collector:
        common["num_workers"] = workers
    split = {k: per_actor(owner, k, v, n) for k, v in devices.items()}
    out = []
    for w, more in enumerate(per_actor(owner, "collector_kwargs", collector_kwargs, n)):
        if more is not None and not isinstance(more, Mapping):
            raise TypeError(
                f"{owner}: collector_kwargs must be a dict or one dict per collector (got "
                f"{type(more).__name__}; expected a Mapping or a list of them). Pass e.g. "
                "collector_kwargs={'init_random_frames': 1000}."
            )
        more = dict(more or {})
        taken = sorted(k for k in more if k in _OWN_KWARGS)
        if taken:
            raise ValueError(
                f"{owner}: collector_kwargs may not set {taken} (got {taken}; expected other "
                "collector arguments): RayCollector sets them. Pass them to RayCollector."
            )
        out.append({**common, **{k: v[w] for k, v in split.items()}, **more})
    return out
