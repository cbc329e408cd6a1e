"""ParallelEnv: one worker process per sub-env, data exchanged through shared memory."""

from __future__ import annotations

import multiprocessing
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl.envs.batched._batched_base import BatchedEnvBase, EnvFactory, check_torchrl_options
from tdrl.envs.batched._pool import WorkerPool
from tdrl.envs.batched._runner import Buffers, EnvRunner
from tdrl.envs.batched._shared import TreeBuffer
from tdrl.envs.batched._worker import worker_main
from tdrl.envs.core import EnvBase, EnvMeta
from tdrl.envs.core._fast import set_next

__all__ = ["ParallelEnv"]

_START_METHODS = ("spawn", "fork", "forkserver")


class ParallelEnv(BatchedEnvBase):
    """Runs ``num_workers`` sub-envs in worker processes behind one batched env.

    Batch size and specs are those of :class:`SerialEnv`: ``[num_workers, *sub_env.batch_size]``
    and the sub-env specs expanded (stacked when per-worker factories or kwargs give specs that
    differ in their values only). The specs are read in this process, one env built and closed
    per distinct factory (an :class:`EnvCreator` caches them), as TorchRL does. The
    workers start on first use (``reset``, ``step``, ``set_seed``...), each builds its env and
    reports its specs: a worker whose specs differ from worker 0's raises ``ValueError``.

    Data moves through buffers allocated once from the specs in shared memory (cpu): the inputs a
    sub-env reads (actions, observations, states, done leaves) are copied in, the pipes carry only
    small commands, and outputs are copied out into fresh tensors that the caller owns and may keep
    across steps. Actions are checked here before dispatch (shape and dtype; bounds when
    ``validate`` is on), so an invalid action never reaches the workers.

    Failures: an exception in a worker raises :class:`~tdrl.errors.WorkerError` naming the worker,
    with the remote type, message and traceback (the original exception is the ``__cause__``
    when it can be unpickled); the workers keep running. A worker that dies raises
    ``WorkerError`` with its pid and exit code or signal; a worker that does not answer within
    ``step_timeout`` is killed and ``TimeoutError`` is raised; in both cases the env closes.
    Workers are non-daemonic processes that exit on their own within seconds when this process
    dies (a watchdog thread, plus ``PR_SET_PDEATHSIG`` on Linux).

    ``close()`` is idempotent, waits at most ``shutdown_timeout`` seconds for the workers to close
    their envs, then kills the stragglers; it also runs from ``__del__``, from ``with`` blocks and
    at interpreter exit. Shared memory uses torch's default strategy (file descriptors on Linux:
    nothing stays in ``/dev/shm``). As in TorchRL, a closed env starts new workers on its next
    ``reset``, ``step``, ``step_and_maybe_reset``, ``set_seed``, ``rollout``, ``state_dict`` or
    ``load_state_dict``: they build new sub-envs, so seeds and the sub-envs' state do not carry
    over (call ``set_seed`` again). After a failure (above) the next call raises
    ``RuntimeError`` naming it instead; ``close()`` acknowledges it, and the call after that
    starts new workers.

    Args:
        num_workers: number of worker processes (one sub-env each).
        create_env_fn: a callable returning an :class:`EnvBase` (class, function, lambda,
            :class:`EnvCreator`), or a list with one per worker. Lambdas travel with cloudpickle.
        create_env_kwargs: keyword arguments of the factory: one dict, or one per worker.
        device: the sub-envs' device (``None``: read from them); another device raises.
        num_threads: torch intra-op threads of this (the parent) process, set when the workers
            start (TorchRL's meaning; ``None`` leaves them as they are).
        num_sub_threads: torch intra-op threads in each worker (default 1).
        serial_for_single: with ``num_workers=1``, run the sub-env in this process (no worker
            process; TorchRL returns a ``SerialEnv`` then, tdrl keeps the ``ParallelEnv`` type).
        mp_start_method: ``"spawn"`` (default), ``"fork"`` or ``"forkserver"``; the global
            multiprocessing start method is never changed.
        step_timeout: seconds to wait for the workers' answer to any command (default 60).
        start_timeout: seconds to wait for the workers to start and build their envs (default
            120: spawn re-imports torch).
        shutdown_timeout: seconds ``close`` waits before killing the workers (default 10).

    TorchRL's other constructor arguments are accepted at their defaults (``consolidate`` has
    no effect: tensors never travel through the pipes); a value tdrl cannot honour
    (``pin_memory=True``, ``memmap=True``, ``shared_memory=False``, ``policy_proof``,
    ``share_individual_td=True``, ``allow_step_when_done=True``, ``non_blocking=True``,
    ``use_buffers=False``, ``metadata_from_workers=True``, ``daemon=True``) raises ``ValueError``.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> with ParallelEnv(2, CountingEnv, mp_start_method="fork") as env:
        ...     td = env.rollout(3)
        ...     pids = env.worker_pids
        >>> td["next", "observation"][:, -1].flatten().tolist(), len(pids)
        ([3.0, 3.0], 2)
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: EnvFactory | Sequence[EnvFactory],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        pin_memory: bool = False,
        share_individual_td: bool | None = None,
        shared_memory: bool = True,
        memmap: bool = False,
        policy_proof: Any = None,
        device: torch.device | str | None = None,
        allow_step_when_done: bool = False,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        serial_for_single: bool = False,
        non_blocking: bool = False,
        mp_start_method: str | None = None,
        use_buffers: bool | None = None,
        metadata_from_workers: bool = False,
        consolidate: bool = True,
        daemon: bool = False,
        shutdown_timeout: float = 10.0,
        step_timeout: float = 60.0,
        start_timeout: float = 120.0,
    ) -> None:
        check_torchrl_options(
            "ParallelEnv",
            {
                "pin_memory": pin_memory,
                "share_individual_td": share_individual_td,
                "shared_memory": shared_memory,
                "memmap": memmap,
                "policy_proof": policy_proof,
                "allow_step_when_done": allow_step_when_done,
                "non_blocking": non_blocking,
                "use_buffers": use_buffers,
                "metadata_from_workers": metadata_from_workers,
                "daemon": daemon,
            },
        )
        method = "spawn" if mp_start_method is None else mp_start_method
        if method not in _START_METHODS:
            raise ValueError(
                f"ParallelEnv.__init__: unknown mp_start_method (got {method!r}; expected one "
                f"of {_START_METHODS}). Pass None for 'spawn'."
            )
        for name, value in (
            ("step_timeout", step_timeout),
            ("start_timeout", start_timeout),
            ("shutdown_timeout", shutdown_timeout),
        ):
            if not value > 0 or value == float("inf"):
                raise ValueError(
                    f"ParallelEnv.__init__: {name} must be a finite number of seconds > 0 "
                    f"(got {value!r})."
                )
        self._pool: WorkerPool | None = None
        self._failure: str | None = None
        # serial_for_single: one worker runs in this process (TorchRL returns a SerialEnv)
        self.in_process = bool(serial_for_single) and num_workers == 1
        self._local: list[EnvBase] = []
        self._runners: list[EnvRunner] = []
        self.mp_start_method = method
        self.num_threads = num_threads
        self.num_sub_threads = int(num_sub_threads)
        self.step_timeout = float(step_timeout)
        self.start_timeout = float(start_timeout)
        self.shutdown_timeout = float(shutdown_timeout)
        super().__init__(num_workers, create_env_fn, create_env_kwargs, device=device)

    def _read_metas(self) -> list[EnvMeta]:
        if self.in_process:
            self._local = [self._creators[0]()]
            return [EnvMeta.from_env(self._local[0])]
        # one env per distinct factory, built here and closed (EnvCreator caches the result)
        return [creator.meta for creator in self._creators]

    def _close_sub_envs(self) -> None:
        for env in self._local:
            env.close()

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the worker processes (empty before the first use and after close)."""
        return [] if self._pool is None else self._pool.pids

    @property
    def is_started(self) -> bool:
        """Whether the worker processes are running (or, in process, the buffers are ready)."""
        return self._pool is not None or bool(self._runners)

    def start(self) -> None:
        """Starts the workers now rather than on first use (no-op when running).

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = ParallelEnv(1, CountingEnv, mp_start_method="fork")
            >>> env.is_started, env.start(), env.is_started
            (False, None, True)
            >>> env.close()
        """
        self._ready_buffers()

    def _ready_buffers(self) -> Buffers:
        if self._pool is not None or self._runners:
            return self._buffers  # type: ignore[return-value]
        if self.is_closed:
            self._reopen()
        if self.num_threads is not None:  # TorchRL: the threads of this (the parent) process
            torch.set_num_threads(int(self.num_threads))
        if self.in_process:
            self._buffers = self._make_buffers(self.device)
            self._runners = [EnvRunner(self._local[0], self._buffers.row(0))]
            self._plan_inputs([self._runners[0].writer_reads])
            return self._buffers
        buffers = self._make_buffers(torch.device("cpu")).share_memory_()
        pool = WorkerPool(
            "ParallelEnv",
            multiprocessing.get_context(self.mp_start_method),
            num_threads=self.num_sub_threads,
            step_timeout=self.step_timeout,
            start_timeout=self.start_timeout,
            shutdown_timeout=self.shutdown_timeout,
            timeout_hint="Raise step_timeout/start_timeout if the env is just slow.",
        )
        self._pool, self._buffers = pool, buffers
        try:
            parts = buffers.to_parts()
            hellos = pool.start(worker_main, [(creator, parts) for creator in self._creators])
        except BaseException:
            self._close_after(pool.failure or "the workers failed to start")
            raise
        for i, (meta, _) in enumerate(hellos):
            diff = self._metas[i].difference(meta)
            if diff is not None:
                self._close_after(f"worker {i} built an env with other specs")
                raise ValueError(
                    f"ParallelEnv.start: worker {i} built an env whose specs differ from the "
                    f"specs read in the parent (got {diff}). Every factory must build envs "
                    "with identical specs."
                )
        self._plan_inputs([reads for _, reads in hellos])
        return buffers

    def _reopen(self) -> None:
        """Lets a closed env start again (TorchRL restarts a closed batched env on use); an env
        closed by a failure stays closed until ``close()`` acknowledges it."""
        if self._failure is not None:
            raise RuntimeError(
                f"ParallelEnv: the env is closed after a failure: {self._failure} (got a call "
                "after it; expected close() first). Call env.close(): the next call then starts "
                "new workers (or build a new ParallelEnv)."
            )
        if self.in_process:
            env = self._creators[0]()
            diff = self.sub_meta.difference(EnvMeta.from_env(env))
            if diff is not None:
                env.close()
                raise ValueError(
                    "ParallelEnv.start: the factory built an env whose specs differ from the "
                    f"first one's (got {diff}). Every call of the factory must build envs with "
                    "identical specs."
                )
            self._local = [env]
        self._closed = False

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Shuts the workers down (idempotent); the next call starts new ones (see the class
        docs). Also acknowledges a failure that closed the env.

        Examples:
            >>> from tdrl.testing import CountingEnv
            >>> env = ParallelEnv(1, CountingEnv, mp_start_method="fork")
            >>> first = env.rollout(2)
            >>> env.close(); env.close()
            >>> env.is_closed, env.rollout(2)["next", "observation"].flatten().tolist()
            (True, [1.0, 2.0])
            >>> env.close()
        """
        self._failure = None
        super().close(raise_if_closed=raise_if_closed)

    def _close_after(self, failure: str | None) -> None:
        """Closes the env after a failure, which the next call reports (see ``_reopen``)."""
        self.close()
        self._failure = failure or "the workers failed"

    def _dispatch(self, cmd: str, args: tuple, workers: Sequence[int]) -> list[Any]:
        if self.in_process:
            return [getattr(self._runners[w], cmd)(*args) for w in workers]
        pool = self._pool
        assert pool is not None
        return self._guarded(pool.run, cmd, args, workers)

    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        # The base method, with the caller's outputs built while the workers step: the fresh
        # tensors of "next", the "next" entry and the next root exist before the answers, which
        # are then copied into them. The parent's own work overlaps the workers' instead of
        # following it (plain, unlocked TensorDicts on the cpu; anything else takes the base
        # method). Whatever fails, the caller's "next" entry is put back as it was.
        pool = self._pool
        if (
            pool is None
            or type(tensordict) is not TensorDict
            or tensordict.is_locked
            or (self.device is not None and self.device.type != "cpu")
        ):
            return super().step_and_maybe_reset(tensordict)
        self._check_actions(tensordict)
        bufs = self._ready_buffers()
        missing = self._write_step_inputs(bufs, tensordict)
        store = tensordict._tensordict
        previous = store.get("next")
        cmd, pending = "step_and_maybe_reset", True  # pending: answers may be on their way
        try:
            self._guarded(pool.begin, cmd, (missing,), self._all_workers)
            try:
                nxt, leaves = bufs.next.empty()
                set_next(tensordict, nxt, True)
                root = self._step_mdp_keep(tensordict)
            except Exception:
                pending = False  # read the answers: the pipes stay in step, the env usable
                self._guarded(pool.finish, cmd, self._all_workers)
                raise
            try:
                flags = self._guarded(pool.finish, cmd, self._all_workers)
            finally:
                pending = False  # read, or the pool is gone (death, timeout, Ctrl-C)
            bufs.next.fill(leaves)
        except BaseException:
            if previous is None:
                store.pop("next", None)
            else:
                store["next"] = previous
            if pending and pool.failure is None:  # e.g. Ctrl-C while building the outputs
                pool.abandon(cmd)
                self._close_after(pool.failure)
            raise
        if store.get("next") is not nxt:  # stored as a copy (e.g. dim names): store it again
            set_next(tensordict, nxt, True)
            root = self._step_mdp_keep(tensordict)
        self._publish_action_masks(bufs)
        if any(flags):
            self._merge_reset_rows(root, bufs, flags)
        return tensordict, root

    def _guarded(self, call: Any, *args: Any) -> Any:
        """``call(*args)`` on the pool; a failure that ended the pool closes this env."""
        pool = self._pool
        try:
            return call(*args)
        except BaseException:
            if pool is not None and pool.failure is not None:
                self._close_after(pool.failure)
            raise

    def _output(self, buf: TreeBuffer) -> TensorDictBase:
        out = buf.clone()
        if self.device is not None and self.device.type != "cpu":
            out = out.to(self.device)
        return out

    def _close(self) -> None:
        pool, self._pool = self._pool, None
        self._release_buffers()
        self._runners = []
        self._close_sub_envs()
        self._local = []
        if pool is not None:
            pool.shutdown()

    def __getstate__(self) -> dict[str, Any]:
        if self._pool is not None or self._local:
            raise TypeError(
                "ParallelEnv.__getstate__: a started ParallelEnv cannot be pickled or copied (got "
                "one with running workers; expected one not started yet). Pickle it before its "
                "first use, or pickle its factories."
            )
        return dict(self.__dict__)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
