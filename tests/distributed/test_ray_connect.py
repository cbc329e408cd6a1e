"""connect_ray and ``tdrl train --ray`` give up after a timeout and say what they tried (Ray
alone retries an unreachable cluster for about 13 minutes). Each case runs in a fresh process:
the test session's own process is connected to the session's Ray cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(60)

_ENV = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _python(code, timeout=45):
    start = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_ENV,
        check=False,
    )
    return run, time.monotonic() - start


def test_connect_ray_to_a_closed_port_fails_after_its_timeout_naming_what_it_tried():
    port = _closed_port()
    run, _ = _python(
        f"""
        import time
        from tdrl.distributed import connect_ray
        t = time.monotonic()
        try:
            connect_ray("127.0.0.1:{port}", timeout=2.0)
        except TimeoutError as err:
            print("ELAPSED", time.monotonic() - t)
            print("MESSAGE", err)
        """
    )
    assert run.returncode == 0, run.stderr[-2000:]
    elapsed = float(run.stdout.split("ELAPSED")[1].split()[0])
    assert 1.5 <= elapsed < 6.0, elapsed  # it retried for the timeout, then gave up
    message = run.stdout.split("MESSAGE", 1)[1]
    assert f"127.0.0.1:{port} within 2 s" in message
    assert "ConnectionRefusedError" in message and "TCP connection attempts" in message


def test_a_port_that_is_not_ray_fails_after_the_timeout_and_the_process_can_exit():
    with socket.socket() as server:  # accepts connections, never speaks Ray's protocol
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        run, took = _python(
            f"""
            import time
            import ray
            from tdrl.distributed import connect_ray
            t = time.monotonic()
            try:
                connect_ray("127.0.0.1:{port}", timeout=3.0)
            except TimeoutError as err:
                print("ELAPSED", time.monotonic() - t)
                print("MESSAGE", err)
            print("CONNECTED", ray.is_initialized())
            """
        )
    assert run.returncode == 0, run.stderr[-2000:]
    elapsed = float(run.stdout.split("ELAPSED")[1].split()[0])
    assert 2.5 <= elapsed < 8.0, elapsed
    assert "did not connect within 3 s" in run.stdout and "CONNECTED False" in run.stdout
    assert took < 40  # the attempt left behind did not hold the process (Ray's own: ~13 min)


def test_connect_ray_checks_its_timeout():
    run, _ = _python(
        """
        from tdrl.distributed import connect_ray
        for bad in (0, -1.0, float("inf"), "30"):
            try:
                connect_ray("127.0.0.1:1", timeout=bad)
            except ValueError as err:
                print("OK", "timeout must be a finite number of seconds > 0" in str(err))
        """
    )
    assert run.stdout.split() == ["OK", "True"] * 4, run.stderr[-2000:]


def test_tdrl_train_ray_to_a_closed_port_exits_with_the_message(tmp_path):
    port = _closed_port()
    argv = ["train", "ppo", "--frames", "64", "--num-envs", "2", "--quiet"]
    argv += ["--out", str(tmp_path / "run"), "--ray", f"127.0.0.1:{port}", "--ray-timeout", "2"]
    start = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "tdrl", *argv],
        capture_output=True,
        text=True,
        timeout=50,
        env=_ENV,
        check=False,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    assert time.monotonic() - start < 30
    assert f"tdrl train: error: connect_ray: no Ray cluster reachable at 127.0.0.1:{port}" in (
        run.stderr
    )
    assert "Traceback" not in run.stderr


@pytest.mark.timeout(180)
def test_connect_ray_joins_a_running_cluster_from_a_fresh_process(ray_session):
    # the join runs in a helper thread: the driver must work from the main thread afterwards
    run, _ = _python(
        f"""
        import ray
        from tdrl.distributed import connect_ray
        assert connect_ray("{ray_session.address}", timeout=30.0)

        @ray.remote
        def answer():
            return 42

        print("ANSWER", ray.get(answer.remote(), timeout=60))
        """,
        timeout=150,
    )
    assert "ANSWER 42" in run.stdout, run.stderr[-3000:]
