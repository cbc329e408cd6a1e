"""Fixtures shared across test folders.

``ray_session``: one simulated Ray cluster (``ray.cluster_utils.Cluster``, a head node with
four logical CPUs) started once per pytest session and shared by every test that needs Ray, so
Ray's start-up (~6 s) is paid once. A test that needs a second node adds and removes its own.
Ray is imported inside the fixture: the rest of the suite never loads it.
"""

from __future__ import annotations

import os
import select
import time

import pytest

# Ray settings for a throw-away local cluster: no token set-up, no usage report, no dashboard.
_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="session")
def _ray_cluster():
    saved = {k: os.environ.get(k) for k in _RAY_ENV}
    os.environ.update(_RAY_ENV)
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # a doctest started a local Ray: the cluster replaces it
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False}
    )
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def ray_session(_ray_cluster, request):
    """The session's Ray cluster; the calling test module is pickled by value, so that the
    env factories and policies it defines can be rebuilt in Ray's worker processes."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(request.module)
    return _ray_cluster


@pytest.fixture
def kill_actor():
    """``kill(handle)``: ``ray.kill`` an actor and return once its process has exited, so the
    next call to it fails for sure (``ray.kill`` itself returns before the actor is gone)."""
    import ray

    def kill(handle, timeout=30.0):
        pid = ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=timeout)
        fd = os.pidfd_open(pid)
        try:
            ray.kill(handle)
            deadline = time.monotonic() + timeout
            assert select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0], pid
        finally:
            os.close(fd)

    return kill
