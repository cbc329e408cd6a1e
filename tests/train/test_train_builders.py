"""make_env's worker-process factory: the workers ignore SIGTERM, the trainer never does."""

from __future__ import annotations

import os
import signal

from tdrl.train._builders import _worker_env


def test_the_worker_factory_ignores_sigterm_only_outside_the_trainers_process():
    before = signal.getsignal(signal.SIGTERM)
    try:
        _worker_env("CartPole", 2, "cpu", None, os.getpid())  # the trainer reading the specs
        assert signal.getsignal(signal.SIGTERM) == before
        env = _worker_env("CartPole", 2, "cpu", None, os.getpid() + 1)  # a worker process
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert env.batch_size == (2,)
    finally:
        signal.signal(signal.SIGTERM, before)
