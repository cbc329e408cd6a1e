"""The batches a :class:`RayCollector` has asked its actors for, and their answers.

Each request carries the actor's sequence number: the driver moves an actor to its next number
only once the batch arrived. A request whose actor was lost is sent again, with the same number,
to the restarted actor, so a batch is collected again and delivered once (a remote buffer drops
a sequence its writer stored already).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tdrl.distributed._fleet import ActorFleet
from tdrl.distributed._options import RayOptions
from tdrl.distributed._ray import ActorLost, get, wait_one
from tdrl.distributed._weights import VersionedWeights

__all__ = ["Requests"]


@dataclass
class _Pending:
    ref: Any
    deadline: float


class Requests:
    """Collect requests in flight: at most one per actor."""

    def __init__(
        self, owner: str, fleet: ActorFleet, weights: VersionedWeights, options: RayOptions
    ) -> None:
        self.owner, self.fleet, self.weights, self.options = owner, fleet, weights, options
        self.pending: dict[int, _Pending] = {}
        self.seq = [0] * fleet.num_actors

    def submit(self, w: int) -> None:
        """Asks actor ``w`` for its next batch, with the weights it should load first."""
        version, weights = self.weights.message(w)
        ref = self.fleet.handles[w].collect.remote(self.seq[w], version, weights)
        self.pending[w] = _Pending(ref, time.monotonic() + self.options.batch_timeout)

    def receive(self, workers: list[int]) -> tuple[int, dict[str, Any], Any]:
        """The first answer among the requests of ``workers``: ``(actor, info, batch)``.

        A lost actor is restarted and asked again; the wait goes on meanwhile.

        Raises:
            WorkerError: an actor raised (its request is dropped, the others stay in flight),
                or a lost actor has no restart left.
            TimeoutError: a request got no answer within ``options.batch_timeout``.
        """
        while True:
            by_ref = {self.pending[w].ref: w for w in workers}
            deadline = min(self.pending[w].deadline for w in workers)
            ref = wait_one(list(by_ref), deadline)
            if ref is None:
                late = [w for w in workers if self.pending[w].deadline <= time.monotonic()]
                if late:
                    raise TimeoutError(
                        f"{self.owner}.__iter__: actors {late} delivered no batch within "
                        f"{self.options.batch_timeout} s (expected one sooner; the collector "
                        "is shut down). Raise RayOptions.batch_timeout if collection is just slow."
                    )
                continue
            w = by_ref[ref]
            try:
                what = f"{self.owner}.__iter__: actor {w}"
                info, batch = get(ref, self.options.batch_timeout, what)
            except ActorLost as err:
                self.fleet.restart(w, err, "__iter__")
                self.submit(w)
                continue
            except Exception as err:
                del self.pending[w]
                self.fleet.raise_remote(w, "__iter__", err)
            del self.pending[w]
            self.seq[w] += 1
            self.weights.loaded(w, int(info["version"]))
            return w, info, batch

    def drain(self) -> list[tuple[int, dict[str, Any], Any]]:
        """Waits for every request in flight; returns their answers."""
        out = []
        while self.pending:
            out.append(self.receive(sorted(self.pending)))
        return out
