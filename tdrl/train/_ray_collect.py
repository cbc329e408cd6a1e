"""``tdrl train --ray``: the trainers collect with Ray actors (:class:`RayCollector`).

Ray is imported only when ``--ray`` is given: ``tdrl.train`` imports without it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from tensordict import TensorDictBase

from tdrl.train._builders import make_env
from tdrl.train._compile import policy_compile

__all__ = ["RayRollouts", "RaySettings", "RayUnreachable", "ray_rollouts"]

_SEED_STRIDE = 7919  # actor w's envs are seeded with seed + (w + 1) * this


class RayUnreachable(ConnectionError):
    """``tdrl train --ray``: Ray could not be reached (or started) within ``--ray-timeout``."""


@dataclass(frozen=True)
class RaySettings:
    """Where and with how many actors ``tdrl train --ray`` collects.

    Attributes:
        address: the Ray cluster to join (``"auto"``, ``"host:6379"``, ...); None starts a
            local Ray.
        num_collectors: collector actors; each runs ``num_envs / num_collectors`` envs.
        connect_timeout: seconds to connect to Ray (or start it) before giving up
            (``--ray-timeout``).

    Examples:
        >>> RaySettings(None, 2).num_collectors
        2
    """

    address: str | None = None
    num_collectors: int = 2
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        n = self.num_collectors
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(
                f"tdrl train --ray: --num-collectors must be an int >= 1 (got {n!r}). Pass e.g. "
                "--num-collectors 2."
            )
        t = self.connect_timeout
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t < float("inf"):
            raise ValueError(
                f"tdrl train --ray: --ray-timeout must be a finite number of seconds > 0 (got "
                f"{t!r}). Pass e.g. --ray-timeout 30."
            )

    def envs_per_collector(self, config: dict[str, Any]) -> int:
        """The envs each actor runs: ``num_envs / num_collectors``.

        Raises:
            ValueError: ``num_envs`` is not a multiple of ``num_collectors``, or the run's
                device is not the cpu (the actors ask Ray for CPUs only).
        """
        n, num_envs = self.num_collectors, int(config["num_envs"])
        if num_envs % n:
            raise ValueError(
                f"tdrl train --ray: num_envs must be a multiple of --num-collectors (got "
                f"num_envs={num_envs} for {n} collectors). Pass e.g. --num-envs "
                f"{n * max(num_envs // n, 1)}."
            )
        device = str(config.get("device", "cpu"))
        if device != "cpu":
            raise ValueError(
                f"tdrl train --ray: the collector actors run on CPUs (got device={device!r}; "
                "expected 'cpu'). Drop --device, or use tdrl.distributed.RayCollector with "
                "remote_configs={'num_gpus': ...} in Python."
            )
        return num_envs // n


class RayRollouts:
    """What the trainers call on a local :class:`Collector` (``rollout``, ``shutdown``), over
    a synchronous :class:`RayCollector` that publishes the policy's weights before each batch:
    every batch is collected, by all actors, with the weights of the latest update."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self._batches = iter(collector)

    def rollout(self) -> TensorDictBase:
        """The next batch, ``[num_collectors, num_envs / num_collectors, T]``."""
        return next(self._batches)

    def shutdown(self) -> None:
        self.collector.shutdown()


def ray_rollouts(
    settings: RaySettings,
    config: dict[str, Any],
    policy: Any,
    *,
    frames_per_batch: int,
    init_random_frames: int = 0,
) -> RayRollouts:
    """Connects to Ray and starts ``settings.num_collectors`` actors collecting with ``policy``
    in the config's env.

    Raises:
        ValueError: ``num_envs`` is not a multiple of the number of collectors.
        RayUnreachable: Ray could not be reached within ``settings.connect_timeout``.
    """
    from tdrl.distributed import RayCollector, connect_ray

    n = settings.num_collectors
    per_actor = settings.envs_per_collector(config)
    try:
        connect_ray(
            settings.address, num_cpus=max(os.cpu_count() or 1, n), timeout=settings.connect_timeout
        )
    except (TimeoutError, ConnectionError) as err:
        raise RayUnreachable(str(err)) from err
    seed = int(config.get("seed", 0))
    fns = [
        functools.partial(
            make_env,
            config["env"],
            per_actor,
            seed=seed + (w + 1) * _SEED_STRIDE,
            options=config.get("env_options"),
        )
        for w in range(n)
    ]
    collector = RayCollector(
        fns,
        policy,
        frames_per_batch=frames_per_batch,
        init_random_frames=init_random_frames,
        sync=True,
        update_after_each_batch=True,
        # --compile with compile.policy: each actor compiles its policy, as a local collector
        collector_kwargs={"compile_policy": policy_compile(config)},
    )
    # through the collector, so that a restarted actor gets a seed of its own instead of
    # replaying its first life's episodes
    collector.set_seed(seed + _SEED_STRIDE)
    return RayRollouts(collector)
