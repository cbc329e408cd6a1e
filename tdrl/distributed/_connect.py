"""connect_ray: join a Ray cluster, or start a local Ray, for this process."""

from __future__ import annotations

import os

from tdrl.distributed._ray import ray

__all__ = ["connect_ray"]


def connect_ray(address: str | None = None, *, num_cpus: int | None = None) -> bool:
    """Connects this process to Ray; returns whether this call started or joined it.

    Without ``address`` a new local Ray instance starts with ``num_cpus`` logical CPUs
    (default: this machine's core count), even when another one runs on this machine; with one (``"auto"``, ``"10.0.0.1:6379"``,
    ``"ray://10.0.0.1:10001"``) the process joins that cluster, started beforehand with
    ``ray start --head``. A Ray already initialised in this process is used as it is, when it is
    the cluster ``address`` names (or no address is given).

    Raises:
        ValueError: this process is already connected to another cluster than ``address``.

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
        ray.init(address=address)
    else:
        # "local": a new instance, even when another one was started on this machine
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False)
    return True
