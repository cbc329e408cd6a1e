"""The ParallelEnv worker process: builds its env, reports the specs and serves an EnvRunner.

The process machinery (wire protocol, start-up, watchdog, command loop) is in ``_process``;
tensors never go through the pipe: they live in the shared buffers.
"""

from __future__ import annotations

from typing import Any

from tdrl.envs.batched._process import WorkerOptions, run_worker
from tdrl.envs.batched._runner import Buffers, EnvRunner
from tdrl.envs.core import EnvCreator, EnvMeta

__all__ = ["worker_main"]


def worker_main(
    index: int, conn: Any, options: WorkerOptions, creator: EnvCreator, buffer_parts: tuple
) -> None:
    """Entry point of worker ``index``: build the env, report its specs, serve commands.

    The first message sent is the env's :class:`EnvMeta` with the input leaves its steps read
    (``EnvRunner.writer_reads``), or the error that prevented building it. ``SIGINT`` is
    ignored: the parent handles Ctrl-C and closes the workers.
    """

    def build() -> tuple[EnvRunner, tuple[EnvMeta, frozenset[int] | None]]:
        env = creator()
        meta = EnvMeta.from_env(env)
        runner = EnvRunner(env, Buffers.from_parts(buffer_parts).row(index))
        return runner, (meta, runner.writer_reads)

    run_worker(conn, options, build)
