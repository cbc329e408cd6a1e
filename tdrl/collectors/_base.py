"""BaseCollector: what every collector shares (TorchRL's abstract collector base).

``with`` blocks and ``__del__`` shut down, ``len`` counts the batches, ``__iter__`` runs
:meth:`BaseCollector.iterator`, and ``update_policy_weights_`` reads TorchRL's ways of passing
weights before handing them to the collector's own ``_push_weights``.
"""

from __future__ import annotations

import abc
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.collectors._split import split_trajectories
from tdrl.collectors._trajs import TrajectoryAssembler, iterate_trajectories
from tdrl.collectors._weight_sync import policy_weights

__all__ = ["BaseCollector", "iterate_batches"]

_C = TypeVar("_C", bound="BaseCollector")
Weights: TypeAlias = TensorDictBase | Mapping[str, Any] | nn.Module


class BaseCollector(abc.ABC):
    """The base of tdrl's collectors; subclass it to write a collector of your own.

    A subclass sets ``requested_frames_per_batch`` (the frames of a batch, TorchRL's name;
    ``frames_per_batch`` is read when it sets only that) and ``total_frames`` (``-1``: never
    stop) and implements :meth:`iterator`, :meth:`shutdown`, :meth:`set_seed`, :meth:`state_dict`,
    :meth:`load_state_dict` and ``_push_weights(weights, worker_ids)`` (``weights`` is None or
    a TensorDict/``state_dict`` of policy weights, ``worker_ids`` None for every worker or a
    list of worker indices). In return it gets ``for batch in collector``, ``len``, ``with``
    blocks (shutdown on exit), shutdown at garbage collection, TorchRL's
    :meth:`update_policy_weights_` forms, background collection into a replay buffer
    (:meth:`start`) and, when it sets ``trajs_per_batch``, batches of whole trajectories.

    Args:
        pre_collect_hook: called with no argument before each batch is collected.
        post_collect_hook: called with each batch before it is yielded or stored.

    Examples:
        >>> from tensordict import TensorDict
        >>> class Constant(BaseCollector):
        ...     requested_frames_per_batch, total_frames = 2, 4
        ...     def iterator(self):
        ...         for _ in range(len(self)):
        ...             yield TensorDict(x=torch.zeros(2), batch_size=[2])
        ...     def shutdown(self, timeout=None, close_env=True, raise_on_error=True): ...
        ...     def set_seed(self, seed, static_seed=False): return seed
        ...     def state_dict(self): return {}
        ...     def load_state_dict(self, state_dict): ...
        ...     def _push_weights(self, weights, worker_ids): ...
        >>> with Constant() as collector:
        ...     [batch.batch_size for batch in collector]
        [torch.Size([2]), torch.Size([2])]
    """

    requested_frames_per_batch: int
    frames_per_batch: int
    total_frames: int
    replay_buffer: Any = None
    reset_at_each_iter = False
    trajs_per_batch: int | None = None
    trajs_per_write: int | None = None
    traj_format = "padded"
    _num_weight_workers = 1  # the worker indices update_policy_weights_ accepts: range(this)
    _assembler: TrajectoryAssembler | None = None  # set while trajs_per_batch iterates
    _thread: threading.Thread | None = None
    _thread_error: BaseException | None = None
    _stop = False

    def __init__(
        self,
        *,
        pre_collect_hook: Callable[[], Any] | None = None,
        post_collect_hook: Callable[[TensorDictBase], Any] | None = None,
    ) -> None:
        self.pre_collect_hook = pre_collect_hook
        self.post_collect_hook = post_collect_hook
        # one batch or weight update at a time: start() collects in a thread
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """The batches, until ``total_frames`` (what ``for batch in collector`` runs)."""

    @abc.abstractmethod
    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Releases envs, processes and memory; idempotent."""

    @abc.abstractmethod
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the envs; returns the next seed."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The collector's state (counters, policy weights, env state)."""

    @abc.abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restores what :meth:`state_dict` returned (``strict`` goes to the env's and the
        policy's ``load_state_dict``)."""

    @abc.abstractmethod
    def _push_weights(self, weights: Any, worker_ids: list[int] | None) -> None:
        """Copies ``weights`` (None: the collector's default source) into the policies of
        ``worker_ids`` (None: all)."""

    # ------------------------------------------------------------------ shared
    def update_policy_weights_(
        self,
        policy_or_weights: Weights | None = None,
        *,
        weights: TensorDictBase | Mapping[str, Any] | None = None,
        policy: nn.Module | None = None,
        worker_ids: int | Sequence[int] | None = None,
        model_id: str | None = None,
        weights_dict: Mapping[str, Any] | None = None,
        policy_weights: Weights | None = None,
    ) -> None:
        """Brings new policy weights to the collector's policy (or its workers' copies).

        Args:
            policy_or_weights: a policy module (its parameters and buffers are taken), a
                TensorDict shaped like ``TensorDict.from_module(policy)`` (a subset of entries
                is fine), a ``state_dict``, or ``{worker_index: weights}`` for per-worker
                weights. ``None``: the current weights of the policy given to the constructor
                (the Collector copies them only when it runs a copy on ``policy_device``; the
                multi-process collectors publish them to their workers).
            weights: the same as a TensorDict or ``state_dict`` given by keyword.
            policy: the same as a module given by keyword.
            worker_ids: the worker index, or indices, to update (None: every worker); the
                others keep their weights. A single-process collector has the one worker 0.
            model_id: ``"policy"`` (or None): tdrl collectors sync the policy only.
            weights_dict: ``{"policy": weights}``, TorchRL's form for several models.
            policy_weights: TorchRL's deprecated name of ``policy_or_weights`` (a
                ``DeprecationWarning``, then the same).

        Raises:
            ValueError: two sources of weights are given, another model than ``"policy"`` is
                named, or a worker index is out of range.
            TypeError: ``worker_ids`` holds something other than worker indices (devices).
        """
        owner = f"{type(self).__name__}.update_policy_weights_"
        if policy_weights is not None:
            if policy_or_weights is not None:
                raise ValueError(
                    f"{owner}: two sources of weights (got policy_or_weights and "
                    "policy_weights; expected one). policy_weights is the deprecated name of "
                    "policy_or_weights: pass only policy_or_weights."
                )
            warnings.warn(
                f"{owner}: policy_weights is deprecated (as in TorchRL); pass the weights as "
                "policy_or_weights.",
                DeprecationWarning,
                stacklevel=2,
            )
            policy_or_weights = policy_weights
        with self._lock:  # after the batch in progress in start()'s thread, if any
            self._update(
                owner, policy_or_weights, weights, policy, worker_ids, model_id, weights_dict
            )

    def _update(
        self,
        owner: str,
        policy_or_weights: Any,
        weights: Any,
        policy: Any,
        worker_ids: Any,
        model_id: Any,
        weights_dict: Any,
    ) -> None:
        source = _one_source(owner, policy_or_weights, weights, policy, model_id, weights_dict)
        per_worker = isinstance(source, Mapping) and not isinstance(source, TensorDictBase)
        if per_worker and len(source) and all(_is_index(k) for k in source):
            if worker_ids is not None:
                raise ValueError(
                    f"{owner}: per-worker weights already name their workers (got worker_ids="
                    f"{worker_ids!r} too). Pass {{worker: weights}} or worker_ids, not both."
                )
            for w, value in source.items():
                self._push_weights(_module_weights(owner, value), self._workers(owner, w))
            return
        self._push_weights(_module_weights(owner, source), self._workers(owner, worker_ids))

    def _workers(self, owner: str, worker_ids: Any) -> list[int] | None:
        if worker_ids is None:
            return None
        ids = [worker_ids] if _is_index(worker_ids) else worker_ids
        if isinstance(ids, (str, torch.device)) or not all(_is_index(w) for w in ids):
            raise TypeError(
                f"{owner}: worker_ids must be worker indices (got {worker_ids!r}; expected an "
                "int or a list of ints). tdrl does not address workers by device."
            )
        n = self._num_weight_workers
        bad = [w for w in ids if not 0 <= w < n]
        if bad:
            raise ValueError(
                f"{owner}: worker_ids {bad} are out of range (got {worker_ids!r}; expected "
                f"indices in [0, {n})). Pass indices of this collector's workers."
            )
        return sorted({int(w) for w in ids})

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        """The batches of :meth:`iterator`; with ``trajs_per_batch``, batches of that many
        complete trajectories reassembled from them (see the collector's docs)."""
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            raise RuntimeError(
                f"{type(self).__name__}.__iter__: the collector collects in the background "
                "(got an iteration after start()). Sample from the replay buffer, or call "
                "async_shutdown() first."
            )
        if self.trajs_per_batch is None:
            return self.iterator()
        return iterate_trajectories(self, self.iterator())

    # ------------------------------------------------------------------ background
    def start(self) -> None:
        """Collects in a background thread into the replay buffer until ``total_frames`` (or
        :meth:`async_shutdown`), while the caller samples from the buffer (TorchRL's
        ``start``). Does nothing when the thread runs already.

        The exploration type is a process-wide setting: a ``set_exploration_type`` block in
        another thread while this one collects changes the type the policy runs under.

        Raises:
            RuntimeError: the collector has no replay buffer.
        """
        if self.replay_buffer is None:
            raise RuntimeError(
                f"{type(self).__name__}.start: background collection writes into a replay buffer "
                "(got replay_buffer=None). Pass replay_buffer= to the constructor."
            )
        if self.is_running():
            return
        self._stop, self._thread_error = False, None
        self._thread = threading.Thread(target=self._run_in_background, daemon=True)
        self._thread.start()

    def _run_in_background(self) -> None:
        try:
            for _ in self:
                if self._stop:
                    return
        except BaseException as error:  # reported by async_shutdown
            self._thread_error = error

    def is_running(self) -> bool:
        """Whether the background collection of :meth:`start` runs."""
        return self._thread is not None and self._thread.is_alive()

    def _stop_background(self, timeout: float | None) -> None:
        """Asks the background thread to stop after its batch and waits for it."""
        self._stop = True
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def async_shutdown(self, timeout: float | None = None, close_env: bool = True) -> None:
        """Stops the background collection of :meth:`start` (after the batch in progress),
        then shuts the collector down.

        Args:
            timeout: seconds to wait for the background thread (None: until it stops).
            close_env: as for :meth:`shutdown`.

        Raises:
            Exception: what the background collection raised, if it failed.
        """
        self._stop_background(timeout)
        self.shutdown(timeout=timeout, close_env=close_env)
        error, self._thread_error = self._thread_error, None
        if error is not None:
            raise error

    def __len__(self) -> int:
        """The number of batches the iterator yields:
        ``ceil(total_frames / requested_frames_per_batch)``.

        Raises:
            TypeError: the collector never stops (``total_frames`` is not positive), as in
                TorchRL.
        """
        if self.total_frames > 0:
            frames = getattr(self, "requested_frames_per_batch", None)
            if frames is None:  # a subclass that sets frames_per_batch only
                frames = self.frames_per_batch
            return -(-self.total_frames // frames)
        raise TypeError(
            f"{type(self).__name__}.__len__: a collector without an end has no length (got "
            f"total_frames={self.total_frames}; expected a positive total_frames). Pass "
            "total_frames to the constructor, or count the batches yourself."
        )

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_source(
    owner: str, positional: Any, weights: Any, policy: Any, model_id: Any, weights_dict: Any
) -> Any:
    """The one source of weights among TorchRL's ways of passing it."""
    if model_id not in (None, "policy"):
        raise ValueError(
            f"{owner}: tdrl collectors sync the policy only (got model_id={model_id!r}; "
            "expected None or 'policy'). Update other models yourself."
        )
    if weights_dict is not None:
        extra = sorted(map(str, set(weights_dict) - {"policy"}))
        if extra or model_id is not None:
            raise ValueError(
                f"{owner}: weights_dict may only hold 'policy', without model_id (got model "
                f"ids {sorted(map(str, weights_dict))}, model_id={model_id!r}). Pass "
                "{'policy': weights}."
            )
    given = {
        "policy_or_weights": positional,
        "weights": weights,
        "policy": policy,
        "weights_dict": None if weights_dict is None else weights_dict.get("policy"),
    }
    named = [k for k, v in given.items() if v is not None]
    if len(named) > 1:
        raise ValueError(
            f"{owner}: give the weights once (got {', '.join(named)}). Pass one of "
            "policy_or_weights, weights=, policy= or weights_dict=."
        )
    return given[named[0]] if named else None


def _module_weights(owner: str, source: Any) -> Any:
    """A module's weights as a TensorDict; anything else unchanged."""
    if not isinstance(source, nn.Module):
        return source
    found = policy_weights(source)
    if found is None:
        raise ValueError(
            f"{owner}: the module has no parameters or buffers (got "
            f"{type(source).__name__}; expected a module with weights). Pass the trained policy."
        )
    return found


class _Iterated(Protocol):
    """What :func:`iterate_batches` reads of a collector."""

    frames: int
    total_frames: int
    split_trajs: bool
    postproc: Callable[[TensorDictBase], TensorDictBase] | None
    replay_buffer: Any
    trajs_per_batch: int | None


def iterate_batches(
    collector: _Iterated,
    next_batch: Callable[[], TensorDictBase],
    post_collect_hook: Callable[[TensorDictBase], Any] | None = None,
) -> Iterator[TensorDictBase | None]:
    """The collectors' ``iterator``: batches from ``next_batch`` until ``total_frames``.

    Each batch is split into trajectories (``split_trajs``), post-processed (``postproc``),
    shown to ``post_collect_hook`` and either yielded or, with a ``replay_buffer``, written to
    it (then ``None`` is yielded). With ``trajs_per_batch`` the batches are always yielded:
    the trajectory assembly writes the buffer.
    """
    writes = collector.replay_buffer is not None and collector.trajs_per_batch is None
    while collector.total_frames < 0 or collector.frames < collector.total_frames:
        batch = next_batch()
        if collector.split_trajs:
            batch = split_trajectories(batch)
        if collector.postproc is not None:
            batch = collector.postproc(batch)
        if post_collect_hook is not None:
            post_collect_hook(batch)
        if writes:
            collector.replay_buffer.extend(batch.reshape(-1))
            yield None
        else:
            yield batch
