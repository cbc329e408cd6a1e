"""The collector actors of a :class:`RayCollector`: start, call, restart and stop them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from tdrl.distributed._actor import ActorSpec, CollectorActor
from tdrl.distributed._options import RayOptions
from tdrl.distributed._ray import ActorLost, get, kill, kill_and_wait, ray, remote_traceback
from tdrl.errors import WorkerError

__all__ = ["ActorFleet", "logger"]

logger = logging.getLogger("tdrl.distributed")

_SEED_STRIDE = 104_729  # a restarted actor's seed moves by this per generation


class ActorFleet:
    """Actor ``w`` of ``n``, generation ``g``: built from one :class:`ActorSpec` kept in the
    object store, restarted (a new actor, generation ``g + 1``) when it is lost, at most
    ``max_restarts`` times per index."""

    def __init__(
        self,
        owner: str,
        spec: ActorSpec,
        configs: Sequence[dict[str, Any]],
        options: RayOptions,
        max_restarts: int,
        uid: str,
    ) -> None:
        self.owner, self.options, self.max_restarts, self.uid = owner, options, max_restarts, uid
        # called with the actor's index after each restart (the weights it runs are reset)
        self.on_restart: Callable[[int], None] | None = None
        self.configs = list(configs)
        n = spec.num_actors
        self.handles: list[Any] = [None] * n
        self.generations = [0] * n
        self.restarts = [0] * n
        self.seeds: list[int | None] = [None] * n
        self.nodes: list[str | None] = [None] * n
        self._spec_ref = ray.put(spec)

    @property
    def num_actors(self) -> int:
        return len(self.handles)

    # ------------------------------------------------------------------ start and restart
    def start(self) -> None:
        """Starts every actor and waits until each built its collector."""
        for w in range(self.num_actors):
            self.handles[w] = self._create(w)
        refs = [h.setup.remote(None) for h in self.handles]
        for w, ref in enumerate(refs):
            try:
                self._setup_answer(w, ref, "__init__")
            except ActorLost as err:
                self.restart(w, err, "__init__")

    def _create(self, w: int) -> Any:
        name = f"tdrl-collector-{self.uid}-{w}-g{self.generations[w]}"
        return CollectorActor.options(name=name, **self.configs[w]).remote(
            self._spec_ref, w, self.generations[w]
        )

    def _setup_answer(self, w: int, ref: Any, method: str) -> None:
        try:
            info = get(ref, self.options.start_timeout, f"{self.owner}.{method}: actor {w}")
        except TimeoutError:
            raise TimeoutError(
                f"{self.owner}.{method}: actor {w} did not start within {self.options.start_timeout} s "
                f"(asked for {self.configs[w]}; the cluster has {ray.available_resources()} "
                "free). Ask for fewer resources per actor (remote_configs), start fewer actors or "
                "raise RayOptions.start_timeout."
            ) from None
        except ActorLost:
            raise
        except Exception as err:
            self.raise_remote(w, "__init__", err)
        self.nodes[w] = info["node"]

    def restart(self, w: int, err: ActorLost, method: str) -> None:
        """Replaces the lost actor ``w`` by a new one (a log line says so; ``method``: the
        public method that found it lost, for messages).

        Raises:
            WorkerError: actor ``w`` already used its ``max_restarts`` restarts.
        """
        while True:
            if self.restarts[w] >= self.max_restarts:
                raise WorkerError(
                    f"{self.owner}.{method}: actor {w} was lost (got {err}) and already used its "
                    f"{self.restarts[w]} restarts (expected at most max_restarts="
                    f"{self.max_restarts}). Raise max_restarts or fix what kills the actor."
                ) from err.cause
            self.restarts[w] += 1
            self.generations[w] += 1
            logger.warning(
                "%s: actor %d was lost (%s); restarting it (restart %d of %d)",
                self.owner,
                w,
                err,
                self.restarts[w],
                self.max_restarts,
            )
            kill(self.handles[w])
            self.handles[w] = self._create(w)
            seed = self.seeds[w]
            if seed is not None:
                seed = (seed + _SEED_STRIDE * self.generations[w]) % 2**31
            try:
                self._setup_answer(w, self.handles[w].setup.remote(seed), method)
            except ActorLost as again:
                err = again
                continue
            if self.on_restart is not None:
                self.on_restart(w)
            return

    def raise_remote(self, w: int, method: str, err: BaseException) -> NoReturn:
        """Raises the ``WorkerError`` for an exception raised in actor ``w`` (``err`` as
        :func:`get` raised it again: its cause is Ray's error with the remote traceback)."""
        after = (
            "The collector is closed: fix the env factory or the policy."
            if method == "__init__"
            else "The actors are still running; fix the env or the policy, or shut down."
        )
        what = str(err).strip().rstrip(".")
        raise WorkerError(
            f"{self.owner}.{method}: actor {w} raised {type(err).__name__}: "
            f"{what}. {after}\n--- remote traceback (actor {w}) ---\n{remote_traceback(err)}"
        ) from err

    # ------------------------------------------------------------------ calls
    def call(self, w: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Calls ``method`` of actor ``w``; a lost actor is restarted and asked again."""
        while True:
            ref = getattr(self.handles[w], method).remote(*args)
            try:
                what = f"{self.owner}.{method}: actor {w}"
                return get(ref, timeout or self.options.call_timeout, what)
            except ActorLost as err:
                self.restart(w, err, method)
            except TimeoutError:
                raise
            except Exception as err:
                self.raise_remote(w, method, err)

    def call_all(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Calls ``method`` of every actor at once (``args[w]`` for actor ``w``)."""
        refs = [getattr(h, method).remote(*a) for h, a in zip(self.handles, args)]
        out = []
        deadline = time.monotonic() + self.options.call_timeout
        for w, ref in enumerate(refs):
            left = max(deadline - time.monotonic(), 0.001)
            try:
                out.append(get(ref, left, f"{self.owner}.{method}: actor {w}"))
            except ActorLost as err:
                self.restart(w, err, method)
                out.append(self.call(w, method, *args[w]))
            except TimeoutError:
                raise
            except Exception as err:
                self.raise_remote(w, method, err)
        return out

    # ------------------------------------------------------------------ stop
    def shutdown(self, timeout: float) -> None:
        """Lets the actors close their collectors for up to ``timeout`` seconds, then kills
        them and waits (bounded) until Ray reports them dead."""
        handles = [h for h in self.handles if h is not None]
        self.handles = [None] * self.num_actors
        if not handles or not ray.is_initialized():
            return
        start = time.monotonic()
        try:
            refs = [h.close.remote() for h in handles]
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
        finally:
            kill_and_wait(handles, max(1.0, timeout - (time.monotonic() - start)))
