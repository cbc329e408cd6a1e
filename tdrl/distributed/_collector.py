"""RayCollector: tdrl collectors in Ray actors, anywhere in a Ray cluster, with restarts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.collectors import BaseCollector, Collector
from tdrl.collectors._base import iterate_batches
from tdrl.collectors._settings import resolve_policy
from tdrl.collectors._weight_sync import as_weights, policy_weights
from tdrl.data import ReplayBuffer
from tdrl.distributed import _args
from tdrl.distributed._actor import ActorSpec
from tdrl.distributed._buffer import RayReplayBuffer
from tdrl.distributed._fleet import ActorFleet
from tdrl.distributed._options import RayOptions
from tdrl.distributed._ray import connect, ray
from tdrl.distributed._requests import Requests
from tdrl.distributed._weights import VersionedWeights
from tdrl.distributed._wire import PackedBatch, unpack
from tdrl.envs.core._exploration_type import ExplorationType

__all__ = ["RayCollector"]

Policy = Callable[[TensorDictBase], TensorDictBase]


class RayCollector(BaseCollector):
    """Collects with ``num_collectors`` Ray actors, each running a tdrl :class:`Collector` (or
    a :class:`MultiSyncCollector`), on this machine or anywhere in a Ray cluster.

    Iteration follows the local multi-process collectors. ``sync=True``: every actor
    contributes to each batch, of batch size ``[num_collectors, *env.batch_size, T]`` with
    ``T = frames_per_batch / (num_collectors * env.batch_size.numel())`` (as
    :class:`MultiSyncCollector`). ``sync=False`` (TorchRL's default): each batch is one actor's,
    ``[*env.batch_size, T]`` with ``T = frames_per_batch / env.batch_size.numel()``, yielded as
    soon as it is ready while the other actors keep collecting (as
    :class:`MultiAsyncCollector`; :attr:`last_worker` tells the actor). Batches are the
    caller's. Each step carries ``("collector", "worker_id")`` (the actor index) and
    ``("collector", "policy_version")``; trajectory ids at ``("collector", "traj_ids")`` are
    unique over actors, batches and restarts.

    Weights: :meth:`update_policy_weights_` puts the new weights in the Ray object store once,
    under the next version number (0 is the weights the actors were built with); an actor loads
    the newest version meant for it before it starts a batch, and the batch carries that
    version. A batch never mixes versions, and after an update each actor delivers at most one
    batch collected with older weights (none with ``sync=True``, where every batch starts after
    the previous one was yielded). ``update_after_each_batch=True`` publishes the policy's
    current weights before each batch. ``max_weight_update_interval=k`` (k >= 0) bounds the
    staleness without publishing every batch: an actor that delivered more than ``k`` batches
    since its weights were last published gets the policy's current weights before its next
    batch (TorchRL's counting: ``k + 1`` batches per published version at most; 0 publishes
    every batch, as ``update_after_each_batch``; -1, the default, never forces one).

    Restarts: an actor that dies (killed, crashed, its node lost) is replaced by a new actor,
    built from the same env factories and policy, at most ``max_restarts`` times per actor
    (:attr:`restarts`, and a warning on the ``"tdrl.distributed"`` logger). The batch it was
    collecting is collected again by the new actor and delivered once. A Python exception in
    the env or the policy is not a restart: it raises :class:`~tdrl.errors.WorkerError`
    naming the actor, with its remote traceback. What a restarted actor does not get back:
    its env and transform state (e.g. running statistics) and the ongoing trajectories; it
    is seeded with the seed given to :meth:`set_seed` moved by its restart count.

    Remote buffer: with a :class:`RayReplayBuffer` as ``replay_buffer``, each actor writes its
    batches into the buffer actor itself (after ``split_trajs`` and ``postproc``, which then
    run in the actors) and the iterator yields ``None`` per batch: data never passes through
    this process. Each write carries the actor's sequence number and the buffer drops a
    sequence it stored already, so a batch is stored once even when its actor died after
    writing it. A local tdrl buffer is filled by this process instead, as the local collectors
    do. In both cases exactly ``len(collector)`` batches are written: no more batches are asked
    for than ``total_frames`` needs.

    Every wait is bounded (:class:`RayOptions`). ``shutdown()`` is idempotent, also runs from
    ``__del__`` and ``with`` blocks, kills the actors and leaves Ray running (Ray itself is
    stopped only with ``shutdown_ray=True``). Ray is started when it is not initialised
    (``ray.init(**ray_init_config)``: a local instance, or the cluster the config names).

    The signature is TorchRL's (then tdrl's ``max_restarts`` and ``options``). Accepted at
    their defaults only: ``trust_policy`` (also True), ``weight_updater``, ``weight_sync_schemes``, ``weight_recv_schemes``, ``trajs_per_batch``.

    Args:
        create_env_fn: an env factory (cloudpickled to the actors) or one per collector.
        policy: a TensorDict-to-TensorDict callable, sent by value; random actions when None.
        policy_factory: builds the policy in each actor instead (or one factory per actor);
            it is also called once here for the reference weights.
        frames_per_batch: frames per batch (over all actors with ``sync=True``).
        total_frames: stop after this many frames (-1: never).
        device, storing_device, env_device, policy_device: as for :class:`Collector`, in each
            actor (one value, or one per collector).
        max_frames_per_traj, init_random_frames, reset_at_each_iter, exploration_type,
            no_cuda_sync, pre_collect_hook, post_collect_hook: as for :class:`Collector`, in
            each actor (-1 means None; ``init_random_frames`` is split over the actors).
        postproc, split_trajs: applied to each batch (here, or in the actors with a remote
            buffer).
        collector_class: :class:`Collector` (``"single"``) or :class:`MultiSyncCollector`
            (``"sync"``, ``num_workers_per_collector`` processes per actor).
        collector_kwargs: more arguments of each actor's collector (a dict, or one per actor).
        num_workers_per_collector: worker processes per actor (MultiSyncCollector).
        sync: see above.
        ray_init_config: ``ray.init`` arguments when Ray is not initialised yet.
        remote_configs: Ray actor options (``num_cpus``, ``num_gpus``, ``resources``,
            ``scheduling_strategy``, ...), one dict or one per actor. Default ``num_cpus=1``.
        num_collectors: the number of actors (default: ``len(create_env_fn)`` for a list, else 1).
        update_after_each_batch: publish the policy's weights before each batch.
        max_weight_update_interval: publish the policy's weights to an actor that delivered
            more than this many batches since its last update (-1: never forced).
        replay_buffer: a :class:`RayReplayBuffer` (written by the actors) or a local tdrl
            buffer (written here); the iterator then yields ``None``.
        use_env_creator: wrap the env factories in :class:`~tdrl.envs.EnvCreator`.
        max_restarts: restarts allowed per actor (a finite int >= 0).
        options: timeouts (:class:`RayOptions`).

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> from tdrl.distributed import connect_ray
        >>> _ = connect_ray()  # a local Ray; connect_ray("auto") joins a running cluster
        >>> with RayCollector(
        ...     CountingEnv, num_collectors=2, frames_per_batch=4, total_frames=8, sync=True
        ... ) as collector:
        ...     shapes = [batch.batch_size for batch in collector]
        >>> shapes
        [torch.Size([2, 2]), torch.Size([2, 2])]
    """

    last_worker: int | None = None

    def __init__(
        self,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: Policy | None = None,
        *,
        policy_factory: Callable[[], Policy] | Sequence[Callable[[], Policy]] | None = None,
        trust_policy: bool | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Any = None,
        storing_device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        max_frames_per_traj: int | None = -1,
        init_random_frames: int | None = -1,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool = False,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        collector_class: Any = Collector,
        collector_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_configs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        num_collectors: int | None = None,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        replay_buffer: Any = None,
        weight_updater: Any = None,
        weight_sync_schemes: Any = None,
        weight_recv_schemes: Any = None,
        use_env_creator: bool = False,
        no_cuda_sync: bool | None = None,
        trajs_per_batch: int | None = None,
        pre_collect_hook: Callable[[], Any] | None = None,
        post_collect_hook: Callable[[TensorDictBase], Any] | None = None,
        max_restarts: int = 3,
        options: RayOptions | None = None,
    ) -> None:
        owner = "RayCollector.__init__"
        self._closed = True  # until the actors run: shutdown() must then do nothing
        _args.check_unsupported(
            owner,
            {
                "trust_policy": trust_policy,
                "weight_updater": weight_updater,
                "weight_sync_schemes": weight_sync_schemes,
                "weight_recv_schemes": weight_recv_schemes,
                "trajs_per_batch": trajs_per_batch,
            },
        )
        fns = _args.env_factories(owner, create_env_fn, num_collectors, bool(use_env_creator))
        n = self.num_workers = self._num_weight_workers = len(fns)
        cls = _args.collector_class_of(owner, collector_class, num_workers_per_collector)
        _args.check_max_restarts(owner, max_restarts)
        self.sync, self.max_restarts = bool(sync), max_restarts
        self.options = options or RayOptions()
        per_actor = self._actor_frames(owner, frames_per_batch, n)
        super().__init__(pre_collect_hook=pre_collect_hook, post_collect_hook=post_collect_hook)
        self.frames_per_batch, self.total_frames, self.frames = frames_per_batch, total_frames, 0
        self.split_trajs, self.postproc = bool(split_trajs), postproc
        self.update_after_each_batch = bool(update_after_each_batch)
        self.max_weight_update_interval = _args.check_interval(owner, max_weight_update_interval)
        self._since_update = [0] * n  # batches each actor delivered since its last update
        factories = _args.per_actor(owner, "policy_factory", policy_factory, n)
        self.policy = resolve_policy(owner, policy, factories[0])
        self._buffer_kind(owner, replay_buffer)
        configs = _args.actor_configs(owner, remote_configs, n)
        settings = {
            "max_frames_per_traj": max_frames_per_traj,
            "init_random_frames": init_random_frames,
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration_type,
            "no_cuda_sync": no_cuda_sync,
            "pre_collect_hook": pre_collect_hook,
            "post_collect_hook": post_collect_hook,
        }
        devices = {"device": device, "storing_device": storing_device}
        devices.update(env_device=env_device, policy_device=policy_device)
        kwargs = _args.actor_kwargs(
            owner,
            cls,
            (n, per_actor, num_workers_per_collector),
            settings,
            devices,
            collector_kwargs,
        )
        spec = ActorSpec(
            collector_class=cls,
            create_env_fns=fns,
            policy=None if policy_factory is not None else policy,
            policy_factories=factories,
            collector_kwargs=kwargs,
            num_actors=n,
            id_stride=n * (max_restarts + 1),
            buffer=self._remote,
            writer=uuid.uuid4().hex[:12],
            write_timeout=self.options.batch_timeout,
            split_trajs=self.split_trajs and self._remote is not None,
            postproc=postproc if self._remote is not None else None,
        )
        self._start(owner, ray_init_config, spec, configs)

    # ------------------------------------------------------------------ construction
    def _actor_frames(self, owner: str, frames_per_batch: int, n: int) -> int:
        if not isinstance(frames_per_batch, int) or frames_per_batch <= 0:
            raise ValueError(
                f"{owner}: frames_per_batch must be a positive int (got {frames_per_batch!r}; "
                "expected e.g. 1000). Pass the frames of each batch."
            )
        if not self.sync:
            return frames_per_batch
        if frames_per_batch % n:
            raise ValueError(
                f"{owner}: with sync=True, frames_per_batch must be a multiple of the number of "
                f"collectors (got {frames_per_batch} for {n} collectors). Every actor collects "
                "frames_per_batch / num_collectors frames."
            )
        return frames_per_batch // n

    def _buffer_kind(self, owner: str, replay_buffer: Any) -> None:
        self.replay_buffer = None  # a local buffer, filled by iterate_batches
        self._remote: RayReplayBuffer | None = None
        if isinstance(replay_buffer, RayReplayBuffer):
            self._remote = replay_buffer
        elif isinstance(replay_buffer, ReplayBuffer):
            self.replay_buffer = replay_buffer
        elif replay_buffer is not None:
            raise TypeError(
                f"{owner}: replay_buffer must be a RayReplayBuffer or a tdrl ReplayBuffer (got "
                f"{type(replay_buffer).__name__}). Pass RayReplayBuffer(...) to let the actors "
                "write it."
            )

    def _start(self, owner: str, init: Any, spec: ActorSpec, configs: list[dict]) -> None:
        self.started_ray = connect(owner, init, self.options.connect_timeout)
        self._weights = VersionedWeights(spec.num_actors)
        name = type(self).__name__  # messages name the public method that hit the problem
        self._fleet = ActorFleet(name, spec, configs, self.options, self.max_restarts, spec.writer)
        self._fleet.on_restart = self._weights.restarted
        self._requests = Requests(name, self._fleet, self._weights, self.options)
        self._closed = False
        try:
            self._fleet.start()
        except BaseException:
            self.shutdown(raise_on_error=False)
            raise

    # ------------------------------------------------------------------ iteration
    def iterator(self) -> Iterator[TensorDictBase | None]:
        """The batches until ``total_frames`` (what ``for batch in collector`` runs)."""
        if self._remote is None:
            return iterate_batches(self, self._next_batch)
        return self._remote_iterator()

    def _remote_iterator(self) -> Iterator[None]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            self._next_batch()
            yield None

    def _next_batch(self) -> Any:
        self._live("__iter__")
        try:
            return self._sync_round() if self.sync else self._async_one()
        except TimeoutError:
            self.shutdown(raise_on_error=False)
            raise

    def _answer(self, w: int, info: dict[str, Any], batch: Any) -> Any:
        self._since_update[w] += 1
        if self._remote is not None:
            self.frames += int(info["frames"])  # stored in the buffer: it counts now
        return batch

    def _sync_round(self) -> TensorDictBase | None:
        requests, n = self._requests, self.num_workers
        if self.update_after_each_batch:
            self.update_policy_weights_()
        self._refresh_stale(range(n))
        for w in range(n):
            if w not in requests.pending:
                requests.submit(w)
        batches: dict[int, Any] = {}
        while len(batches) < n:
            w, info, batch = requests.receive([w for w in range(n) if w not in batches])
            batches[w] = self._answer(w, info, batch)
        if self._remote is not None:
            return None
        self.frames += self.frames_per_batch
        return torch.stack([unpack(batches[w]) for w in range(n)])  # a copy the caller owns

    def _async_one(self) -> TensorDictBase | None:
        requests = self._requests
        self._fill()
        w, info, batch = requests.receive(sorted(requests.pending))
        self.last_worker = w
        batch = self._answer(w, info, batch)
        if self._remote is None:
            self.frames += self.frames_per_batch
            if isinstance(batch, PackedBatch):  # on the object store's memory: copy it out
                batch = unpack(batch).clone()
        if self.update_after_each_batch:
            self.update_policy_weights_()
        self._fill()  # the actor that delivered starts its next batch at once
        return batch

    def _fill(self) -> None:
        """Asks idle actors for a batch while ``total_frames`` needs more."""
        requests = self._requests
        for w in range(self.num_workers):
            coming = self.frames + self.frames_per_batch * len(requests.pending)
            if 0 <= self.total_frames <= coming:
                return
            if w not in requests.pending:
                self._refresh_stale([w])
                requests.submit(w)

    def _refresh_stale(self, workers: Any) -> None:
        """``max_weight_update_interval``: publishes the policy's weights to the actors among
        ``workers`` that delivered more batches than the interval since their last update."""
        k = self.max_weight_update_interval
        if k < 0:
            return
        stale = [w for w in workers if self._since_update[w] > k]
        if stale:
            self._push_weights(None, stale)

    def _drain(self) -> None:
        """Waits for the batches in flight; returned batches are dropped (as the local async
        collector's), batches written to a remote buffer count."""
        for w, info, batch in self._requests.drain():
            self._answer(w, info, batch)

    # ------------------------------------------------------------------ weights
    def _push_weights(self, weights: Any, worker_ids: list[int] | None) -> None:
        """Publishes ``weights`` (None: the current weights of the policy) as a new version
        for the actors ``worker_ids`` (None: all)."""
        self._live("update_policy_weights_")
        ref = policy_weights(self.policy)
        if ref is None:
            if weights is not None:
                raise ValueError(
                    "RayCollector.update_policy_weights_: the policy has no weights to update "
                    f"(got {type(self.policy).__name__}; expected an nn.Module). Pass no weights."
                )
            return
        new = ref if weights is None else as_weights("RayCollector", weights, ref)
        self._weights.publish(new, worker_ids)
        for w in range(self.num_workers) if worker_ids is None else worker_ids:
            self._since_update[w] = 0

    @property
    def policy_version(self) -> int:
        """The newest weights version (0 until :meth:`update_policy_weights_`)."""
        return self._weights.version

    # ------------------------------------------------------------------ state
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds every actor with a distinct seed (chained through the actors' envs; with
        ``static_seed`` each gets ``seed``); returns the next seed of the chain."""
        self._live("set_seed")
        self._drain()
        for w in range(self.num_workers):
            self._fleet.seeds[w] = seed
            seed = int(self._fleet.call(w, "set_seed", seed, static_seed))
        return seed

    def state_dict(self) -> dict[str, Any]:
        """The frame counter and each actor's collector state and policy version."""
        self._live("state_dict")
        self._drain()
        states = self._fleet.call_all("state_dict", [()] * self.num_workers)
        return {"frames": self.frames, "workers": states}

    def load_state_dict(
        self, state_dict: Mapping[str, Any] | Sequence[Any], *, strict: bool = True
    ) -> None:
        """Restores :meth:`state_dict` (also TorchRL's list of per-collector states);
        ``strict`` goes to the actors' env and policy ``load_state_dict``."""
        self._live("load_state_dict")
        if isinstance(state_dict, Mapping):
            workers = list(state_dict["workers"])
        else:
            workers = list(state_dict)
        if len(workers) != self.num_workers:
            raise ValueError(
                f"RayCollector.load_state_dict: the state holds {len(workers)} collectors "
                f"(expected {self.num_workers}). Load it into a RayCollector with as many."
            )
        self._drain()
        self._fleet.call_all("load_state_dict", [(s, strict) for s in workers])
        for w, state in enumerate(workers):  # the actors run the state's weights until an update
            self._weights.reset(w, int(state.get("policy_version", 0)))
        if isinstance(state_dict, Mapping):
            self.frames = int(state_dict["frames"])

    def reset(self, reset_idx: Sequence[bool] | None = None) -> None:
        """Resets the envs of the actors where ``reset_idx`` (one bool per actor; None: all) is
        true; batches in flight are waited for first."""
        self._live("reset")
        if reset_idx is None:
            reset_idx = [True] * self.num_workers
        if len(reset_idx) != self.num_workers:
            raise ValueError(
                f"RayCollector.reset: reset_idx needs one bool per actor (got {len(reset_idx)} "
                f"for {self.num_workers} actors). Pass e.g. [True] * num_collectors."
            )
        self._drain()
        for w, yes in enumerate(reset_idx):
            if yes:
                self._fleet.call(w, "reset")

    # ------------------------------------------------------------------ actors
    @property
    def restarts(self) -> list[int]:
        """How many times each actor was restarted."""
        return list(self._fleet.restarts) if hasattr(self, "_fleet") else []

    @property
    def num_restarts(self) -> int:
        """The restarts of all actors together."""
        return sum(self.restarts)

    @property
    def remote_collectors(self) -> list[Any]:
        """The Ray actor handles, one per collector (TorchRL's name)."""
        return list(self._fleet.handles) if hasattr(self, "_fleet") else []

    @property
    def actor_nodes(self) -> list[str | None]:
        """The Ray node id each actor runs on (a restarted actor may run elsewhere)."""
        return list(self._fleet.nodes) if hasattr(self, "_fleet") else []

    def local_policy(self) -> Any:
        """The policy of this process, whose weights ``update_policy_weights_()`` publishes."""
        return self.policy

    def stop_remote_collectors(self) -> None:
        """TorchRL's name for :meth:`shutdown`: kills the actors."""
        self.shutdown()

    def _live(self, method: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"RayCollector.{method}: the collector is shut down (got a call after "
                "shutdown() or a timeout). Build a new collector."
            )

    def shutdown(
        self,
        timeout: float | None = None,
        close_env: bool = True,
        raise_on_error: bool = True,
        *,
        shutdown_ray: bool = False,
    ) -> None:
        """Closes the actors' collectors (``timeout``, default ``options.shutdown_timeout``)
        and kills the actors; idempotent. Ray keeps running unless ``shutdown_ray=True``.

        Args:
            timeout: seconds the actors get to close their envs before they are killed.
            close_env: must be True: the actors' envs close with them (as in TorchRL).
            raise_on_error: raise what stopping the actors raised; False swallows it.
            shutdown_ray: also disconnect this process from Ray (``ray.shutdown()``), which
                stops a local Ray instance.
        """
        if not close_env:
            raise ValueError(
                "RayCollector.shutdown: the actors' envs close with the actors (got "
                "close_env=False; expected True). Drop close_env."
            )
        if timeout is not None and not timeout >= 0:
            raise ValueError(
                f"RayCollector.shutdown: timeout must be None or >= 0 seconds (got {timeout!r}; "
                "expected e.g. 10.0). Pass None to use RayOptions.shutdown_timeout."
            )
        if not self._closed:
            self._closed = True
            self._requests.pending.clear()
            try:
                self._fleet.shutdown(self.options.shutdown_timeout if timeout is None else timeout)
            except Exception:
                if raise_on_error:
                    raise
        if shutdown_ray and ray.is_initialized():
            ray.shutdown()
