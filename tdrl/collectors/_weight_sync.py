"""Weight sync schemes: how a multi-process collector brings new policy weights to its workers.

A scheme has a parent side (``setup`` once, ``send`` on every ``update_policy_weights_``,
``message`` for each command that starts a batch) and a worker side, the picklable receiver
that ``setup`` returns for each worker (``attach`` to the worker's policy once, ``receive``
before every batch). The contract every scheme keeps: once ``send(weights, worker_ids)``
returned, every batch of those workers (None: all) whose collection starts later runs with the
sent weights, the other workers keep theirs; a batch never mixes two versions.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from multiprocessing.context import BaseContext
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

__all__ = [
    "MultiProcessWeightSyncScheme",
    "NoWeightSyncScheme",
    "SharedMemWeightSyncScheme",
    "WeightReceiver",
    "WeightSyncScheme",
    "policy_weights",
]


def policy_weights(policy: Any) -> TensorDictBase | None:
    """The parameters and buffers of ``policy`` as a TensorDict (None if it has none).

    Examples:
        >>> policy_weights(torch.nn.Linear(2, 1))["weight"].shape
        torch.Size([1, 2])
        >>> policy_weights(lambda td: td) is None
        True
    """
    if not isinstance(policy, nn.Module):
        return None
    weights = TensorDict.from_module(policy)
    return None if weights.is_empty() else weights


def as_weights(
    owner: str, weights: TensorDictBase | Mapping[str, torch.Tensor], like: TensorDictBase
) -> TensorDictBase:
    """Checks ``weights`` (a TensorDict or a ``state_dict``) against ``like`` and returns a
    detached TensorDict; raises ``KeyError``/``ValueError`` naming the entry that does not fit."""
    if not isinstance(weights, TensorDictBase):
        if not isinstance(weights, Mapping):
            raise TypeError(
                f"{owner}: weights must be a TensorDict or a state_dict (got "
                f"{type(weights).__name__}). Pass TensorDict.from_module(policy) or "
                "policy.state_dict()."
            )
        weights = TensorDict(dict(weights), batch_size=[]).unflatten_keys(".")
    known = {k: v for k, v in like.items(True, True)}
    for key, value in weights.items(True, True):
        ref = known.get(key)
        if ref is None:
            raise KeyError(
                f"{owner}: weight {key!r} is not an entry of the policy (available keys: "
                f"{sorted(map(str, known))}). Pass weights taken from the same policy class."
            )
        if value.shape != ref.shape:
            raise ValueError(
                f"{owner}: weight {key!r} has the wrong shape (got {tuple(value.shape)}; "
                f"expected {tuple(ref.shape)}). Pass weights of the same architecture."
            )
    return weights.detach()


class WeightReceiver:
    """Worker side of a scheme: ``attach`` once to the worker's policy, ``receive`` per batch.

    The base receiver ignores everything (it serves :class:`NoWeightSyncScheme`).

    Examples:
        >>> receiver = WeightReceiver()
        >>> receiver.attach(torch.nn.Linear(1, 1)), receiver.receive(None)
        (None, None)
    """

    def attach(self, policy: Any) -> None:
        """Binds the receiver to the worker's copy of the policy."""

    def receive(self, message: Any) -> None:
        """Applies what the parent sent (``message`` comes with the command that starts a
        batch; ``None`` when the scheme has nothing to say)."""


class WeightSyncScheme:
    """Parent side of a scheme (the base class does nothing: see the subclasses).

    A scheme instance serves one collector: ``setup`` may only run once. A new scheme subclasses
    this and :class:`WeightReceiver`: ``setup`` returns its receivers (they travel to the
    worker processes, so they must pickle), ``send`` publishes, ``message`` attaches what a
    worker must receive to the command that starts its next batch.

    Examples:
        >>> import multiprocessing
        >>> scheme = WeightSyncScheme()
        >>> receivers = scheme.setup(None, 2, multiprocessing.get_context("spawn"))
        >>> len(receivers), scheme.message(1)
        (2, None)
    """

    def __init__(self) -> None:
        self._ready = False

    def _claim(self) -> None:
        if self._ready:
            raise RuntimeError(
                f"{type(self).__name__}.setup: the scheme is already used by a collector (got a "
                "second setup; expected one). Build one scheme per collector."
            )
        self._ready = True

    def setup(self, policy: Any, num_workers: int, ctx: BaseContext) -> list[WeightReceiver]:
        """Prepares the parent side and returns one picklable receiver per worker."""
        self._claim()
        return [WeightReceiver() for _ in range(num_workers)]

    def send(self, weights: TensorDictBase, worker_ids: list[int] | None = None) -> None:
        """Publishes ``weights`` (checked against the policy by the collector) to the workers
        ``worker_ids`` (None: all)."""

    def message(self, worker: int) -> Any:
        """What goes to ``worker`` with the command that starts its next batch."""
        return None

    def close(self) -> None:
        """Releases what ``setup`` allocated (idempotent)."""


class NoWeightSyncScheme(WeightSyncScheme):
    """Workers keep the weights the policy had when they started; updates are ignored.

    The default for policies without weights (``None``, plain functions).

    Examples:
        >>> scheme = NoWeightSyncScheme()
        >>> import multiprocessing
        >>> receivers = scheme.setup(None, 2, multiprocessing.get_context("fork"))
        >>> scheme.message(0) is None, len(receivers)
        (True, 2)
    """


class _SharedMemReceiver(WeightReceiver):
    def __init__(self, shared: TensorDictBase, version: torch.Tensor, lock: Any, timeout: float):
        self.shared, self.version, self.lock, self.timeout = shared, version, lock, timeout
        self._seen = 0
        self._local: TensorDictBase | None = None

    def attach(self, policy: Any) -> None:
        self._local = policy_weights(policy)

    def receive(self, message: Any) -> None:
        if self._local is None:
            return
        if int(self.version) != self._seen:
            self._copy_shared()
        if message is not None:  # sent to this worker only: newer than the shared copy
            with torch.no_grad():
                self._local.update_(pickle.loads(message))

    def _copy_shared(self) -> None:
        assert self._local is not None
        if not self.lock.acquire(timeout=self.timeout):
            raise TimeoutError(
                f"SharedMemWeightSyncScheme.receive: the weights lock stayed taken for "
                f"{self.timeout} s (expected the parent to release it within that time). The "
                "parent may be stuck in update_policy_weights_."
            )
        try:
            with torch.no_grad():
                self._local.update_(self.shared)
            self._seen = int(self.version)
        finally:
            self.lock.release()


class SharedMemWeightSyncScheme(WeightSyncScheme):
    """One copy of the weights in shared memory; each worker copies it into its policy when a
    batch starts and the version changed (the default for policies with weights).

    ``send`` writes the new weights into the shared copy under a lock and bumps a version
    counter; a worker reads the counter before each batch and, when it moved, copies the shared
    weights into its own policy under the same lock. Nothing goes through the pipes and the
    copy happens only after an update. Memory: one extra copy of the weights (cpu). Weights
    sent to some workers only (``worker_ids``) travel by value with those workers' next batch
    command instead, so the shared copy stays the one every other worker may still load.

    Args:
        lock_timeout: seconds ``send`` and the workers wait for the lock.

    Examples:
        >>> import multiprocessing
        >>> scheme = SharedMemWeightSyncScheme()
        >>> (receiver,) = scheme.setup(torch.nn.Linear(2, 1), 1, multiprocessing.get_context("fork"))
        >>> worker_policy = torch.nn.Linear(2, 1)
        >>> receiver.attach(worker_policy)
        >>> scheme.send(TensorDict({"bias": torch.ones(1)}))
        >>> receiver.receive(scheme.message(0))
        >>> worker_policy.bias.tolist()
        [1.0]
    """

    def __init__(self, lock_timeout: float = 60.0) -> None:
        super().__init__()
        self.lock_timeout = float(lock_timeout)
        self._shared: TensorDictBase | None = None
        self._version: torch.Tensor | None = None
        self._lock: Any = None
        self._pending: list[bytes | None] = []

    def setup(self, policy: Any, num_workers: int, ctx: BaseContext) -> list[WeightReceiver]:
        weights = policy_weights(policy)
        if weights is None:
            raise ValueError(
                "SharedMemWeightSyncScheme.setup: the policy has no weights (got "
                f"{type(policy).__name__}; expected an nn.Module with parameters or buffers). "
                "Use NoWeightSyncScheme() for such policies."
            )
        self._claim()
        self._shared = weights.detach().to("cpu").clone().share_memory_()
        self._version = torch.zeros((), dtype=torch.int64).share_memory_()
        self._lock = ctx.Lock()
        self._pending = [None] * num_workers
        return [
            _SharedMemReceiver(self._shared, self._version, self._lock, self.lock_timeout)
            for _ in range(num_workers)
        ]

    def send(self, weights: TensorDictBase, worker_ids: list[int] | None = None) -> None:
        if worker_ids is not None and set(worker_ids) != set(range(len(self._pending))):
            blob = pickle.dumps(weights.detach().to("cpu"), protocol=pickle.HIGHEST_PROTOCOL)
            for w in worker_ids:
                self._pending[w] = blob
            return
        if self._shared is None or self._version is None:
            raise RuntimeError(
                "SharedMemWeightSyncScheme.send: setup has not run (got a send before the "
                "collector started; expected setup first). Pass the scheme to a collector."
            )
        if not self._lock.acquire(timeout=self.lock_timeout):
            raise TimeoutError(
                f"SharedMemWeightSyncScheme.send: a worker held the weights lock for more than "
                f"{self.lock_timeout} s (expected a copy to take milliseconds). A worker may "
                "have died while copying: shut the collector down."
            )
        try:
            self._shared.update_(weights)
            self._version += 1
            self._pending = [None] * len(self._pending)  # older than what every worker gets
        finally:
            self._lock.release()

    def message(self, worker: int) -> Any:
        blob, self._pending[worker] = self._pending[worker], None
        return blob

    def close(self) -> None:
        self._shared = None
        self._version = None
        self._pending = [None] * len(self._pending)


class _PipeReceiver(WeightReceiver):
    def __init__(self) -> None:
        self._local: TensorDictBase | None = None

    def attach(self, policy: Any) -> None:
        self._local = policy_weights(policy)

    def receive(self, message: Any) -> None:
        if message is None or self._local is None:
            return
        with torch.no_grad():
            self._local.update_(pickle.loads(message))


class MultiProcessWeightSyncScheme(WeightSyncScheme):
    """Weights travel by value through the command pipes, with the command starting a batch.

    ``send`` serialises the weights once; each worker receives the copy with its next batch
    command and loads it into its policy first. Costs one pipe transfer per worker and update;
    no shared memory.

    Examples:
        >>> import multiprocessing
        >>> scheme = MultiProcessWeightSyncScheme()
        >>> (receiver,) = scheme.setup(torch.nn.Linear(2, 1), 1, multiprocessing.get_context("fork"))
        >>> worker_policy = torch.nn.Linear(2, 1)
        >>> receiver.attach(worker_policy)
        >>> scheme.send(TensorDict({"bias": torch.ones(1)}))
        >>> receiver.receive(scheme.message(0))
        >>> worker_policy.bias.tolist(), scheme.message(0) is None
        ([1.0], True)
    """

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[bytes | None] = []

    def setup(self, policy: Any, num_workers: int, ctx: BaseContext) -> list[WeightReceiver]:
        self._claim()
        self._pending = [None] * num_workers
        return [_PipeReceiver() for _ in range(num_workers)]

    def send(self, weights: TensorDictBase, worker_ids: list[int] | None = None) -> None:
        blob = pickle.dumps(weights.detach().to("cpu"), protocol=pickle.HIGHEST_PROTOCOL)
        for w in range(len(self._pending)) if worker_ids is None else worker_ids:
            self._pending[w] = blob

    def message(self, worker: int) -> Any:
        blob, self._pending[worker] = self._pending[worker], None
        return blob

    def close(self) -> None:
        self._pending = [None] * len(self._pending)
