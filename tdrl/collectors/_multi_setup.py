"""How the multi-process collectors read their env factories, options and worker layouts."""

from __future__ import annotations

import functools
import math
from typing import Any

from tensordict import TensorDictBase

from tdrl.envs import EnvBase

__all__ = ["START_METHODS", "check_options", "env_fns", "layout_difference"]

START_METHODS = ("spawn", "fork", "forkserver")


def env_fns(owner: str, create_env_fn: Any, num_workers: int | None, kwargs: Any) -> list[Any]:
    """One env factory per worker: TorchRL's list of factories, or one factory and
    ``num_workers``; ``create_env_kwargs`` (a dict, or one per worker) bound to them."""
    if isinstance(create_env_fn, (list, tuple)):
        fns = list(create_env_fn)
        if num_workers is not None and num_workers != len(fns):
            raise ValueError(
                f"{owner}.__init__: num_workers does not match create_env_fn (got "
                f"num_workers={num_workers} and {len(fns)} env factories). Pass one of them."
            )
    elif callable(create_env_fn) and not isinstance(create_env_fn, EnvBase) and num_workers:
        fns = [create_env_fn] * int(num_workers)
    else:
        fns = []
    if not fns or not all(callable(f) and not isinstance(f, EnvBase) for f in fns):
        raise TypeError(
            f"{owner}.__init__: create_env_fn must be a non-empty list of callables returning "
            f"an EnvBase, one per worker, or one callable with num_workers (got "
            f"{create_env_fn!r}). Pass e.g. [make_env] * 2 or make_env, num_workers=2."
        )
    per_worker = kwargs if isinstance(kwargs, (list, tuple)) else [kwargs] * len(fns)
    if len(per_worker) != len(fns):
        raise ValueError(
            f"{owner}.__init__: create_env_kwargs holds {len(per_worker)} dicts (expected one "
            f"per worker: {len(fns)}). Pass one dict for all workers or one per worker."
        )
    return [functools.partial(f, **kw) if kw else f for f, kw in zip(fns, per_worker)]


def check_options(owner: str, method: str, options: Any) -> None:
    """Checks ``mp_start_method`` and the timeouts of ``options`` (a MultiCollectorOptions)."""
    if method not in START_METHODS:
        raise ValueError(
            f"{owner}.__init__: unknown mp_start_method (got {method!r}; expected one of "
            f"{START_METHODS}). Pass None for 'spawn'."
        )
    for name in ("start_timeout", "batch_timeout", "shutdown_timeout"):
        value = getattr(options, name)
        if not value > 0 or math.isinf(value):
            raise ValueError(
                f"{owner}.__init__: options.{name} must be a finite number of seconds > 0 "
                f"(got {value!r}). Pass e.g. 60.0."
            )


def layout_difference(a: TensorDictBase, b: TensorDictBase) -> str | None:
    keys_a, keys_b = set(a.keys(True, True)), set(b.keys(True, True))
    if keys_a != keys_b:
        return f"keys {sorted(map(str, keys_a ^ keys_b))} are not in both"
    for key in keys_a:
        x, y = a.get(key), b.get(key)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{key!r}: {tuple(x.shape)} {x.dtype} != {tuple(y.shape)} {y.dtype}"
    return None
