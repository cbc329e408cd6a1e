"""connect_ray: join a Ray cluster, or start a local Ray, for this process."""

from __future__ import annotations

import os

from tdrl.distributed._ray import init_within, ray

__all__ = ["connect_ray"]


def connect_ray(
    address: str | None = None, *, num_cpus: int | None = None, timeout: float = 30.0
) -> bool:
    """Connects this process to Ray; returns whether this call started or joined it.

    Without ``address`` a new local Ray instance starts with ``num_cpus`` logical CPUs
    (default: this machine's core count), even when another one runs on this machine; with one (``"auto"``, ``"10.0.0.1:6379"``,
    ``"ray://10.0.0.1:10001"``) the process joins that cluster, started beforehand with
    ``ray start --head``. A Ray already initialised in this process is used as it is, when it is
    the cluster ``address`` names (or no address is given).

    Connecting (or starting) gets ``timeout`` seconds; an explicit ``host:port`` address is
    probed over TCP first, again and again while the time lasts, so a head node that is still
    starting is found. (Ray alone retries an unreachable cluster for about 13 minutes.)

    Raises:
        ValueError: this process is already connected to another cluster than ``address``,
            or ``timeout`` is not a finite number of seconds > 0.
        TimeoutError: no connection within ``timeout``; the message names the address and
            what was tried.
        ConnectionError: Ray refused the address (e.g. ``"auto"`` with no cluster running).

    Examples:
        >>> import ray
        >>> _ = connect_ray()  # a local Ray, unless this process has one already
        >>> ray.is_initialized()
        True
    """
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in (None, "", "auto", current):
            raise ValueError(
                f"connect_ray: this process is already connected to the Ray cluster at {current} "
                f"(got address={address!r}; expected that cluster or None). One process joins "
                "one Ray cluster: drop the address or run in a new process."
            )
        return False
    if address:
        init_within("connect_ray", {"address": address}, timeout)
    else:
        # "local": a new instance, even when another one was started on this machine
        cpus = num_cpus or os.cpu_count() or 1
        kwargs = {"address": "local", "num_cpus": cpus, "include_dashboard": False}
        init_within("connect_ray", kwargs, timeout)
    return True
