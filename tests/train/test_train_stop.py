"""GracefulStop: the signal handlers behind ``tdrl train``'s preemption (in this process; the
end-to-end runs are in test_train_preemption.py)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tdrl.train._stop import GracefulStop, StopTimeout

pytestmark = pytest.mark.timeout(30)


def _spin_until(predicate, limit=10.0):
    """Runs Python bytecode (where signal handlers run) until ``predicate`` or ``limit`` s."""
    deadline = time.monotonic() + limit
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_first_sigterm_or_sigint_only_asks_for_a_stop(capsys):
    for sig in (signal.SIGTERM, signal.SIGINT):
        with GracefulStop(timeout=30) as stop:
            os.kill(os.getpid(), sig)
            assert _spin_until(lambda: stop.requested is not None)
            assert stop.requested == sig.name
        assert f"{sig.name} received: finishing the current iteration" in capsys.readouterr().err


def test_a_second_ctrl_c_raises_at_once_and_a_second_sigterm_does_not(capsys):
    with GracefulStop(timeout=30) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert _spin_until(lambda: stop.requested is not None)
        os.kill(os.getpid(), signal.SIGTERM)  # schedulers may send it twice
        time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            _spin_until(lambda: False, limit=5.0)
    err = capsys.readouterr().err
    assert "SIGTERM received again: the stop is under way" in err
    assert "second Ctrl-C: stopping at once" in err


def test_a_stop_that_overruns_its_timeout_raises_stop_timeout_in_the_main_thread():
    with GracefulStop(timeout=0.3) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        start = time.monotonic()
        with pytest.raises(
            StopTimeout, match=r"did not finish within 0.3 s .*previous one is intact"
        ):
            _spin_until(lambda: False, limit=10.0)  # an update that never ends
        assert 0.2 < time.monotonic() - start < 5.0
        assert stop.requested == "SIGTERM"
    assert issubclass(StopTimeout, KeyboardInterrupt)  # Ctrl-C clean-up paths run for it


def test_uninstall_restores_the_previous_handlers_and_cancels_the_limit():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}
    stop = GracefulStop(timeout=0.2).install()
    stop.install()  # again (after ray.init replaced one): the originals are still restored
    os.kill(os.getpid(), signal.SIGTERM)
    assert _spin_until(lambda: stop.requested is not None)
    stop.uninstall()
    stop.uninstall()
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.3)  # no StopTimeout arrives after the stop ended


def test_install_outside_the_main_thread_and_bad_timeouts_are_refused():
    for bad in (0, -1, float("inf"), "30", True):
        with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0"):
            GracefulStop(timeout=bad)
    errors = []

    def install():
        try:
            GracefulStop().install()
        except RuntimeError as err:
            errors.append(str(err))

    thread = threading.Thread(target=install)
    thread.start()
    thread.join(10)
    assert errors and "only be installed by the main thread" in errors[0]
