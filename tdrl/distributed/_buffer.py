"""RayReplayBuffer: a tdrl replay buffer that lives in a Ray actor, shared by many writers."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.data import ReplayBuffer
from tdrl.distributed._buffer_actor import BufferActor
from tdrl.distributed._options import RayOptions
from tdrl.distributed._ray import ActorLost, connect, get, kill_and_wait, ray
from tdrl.distributed._remote_config import actor_options
from tdrl.errors import WorkerError

__all__ = ["RayReplayBuffer"]


class RayReplayBuffer:
    """A tdrl replay buffer in a Ray actor: collectors anywhere in the cluster write to it and
    the learner samples from it, without the data passing through the learner first.

    ``replay_buffer_cls(*args, **kwargs)`` is built inside the actor: any tdrl buffer with any
    storage, sampler and writer. Its methods run there, one call at a time, so concurrent
    writers (several :class:`RayCollector` actors, the learner) never interleave. The methods
    are the buffer's: :meth:`extend`, :meth:`add`, :meth:`sample`, :meth:`update_priority`,
    :meth:`update_tensordict_priority` (only the ``"index"`` and priority entries travel),
    :meth:`dumps`/:meth:`loads`, :meth:`state_dict`/:meth:`load_state_dict`, :meth:`empty`,
    ``len``, :attr:`write_count`; what they raise in the actor is raised here unchanged (a
    ``loads`` of a bad checkpoint raises the same ``CheckpointError`` naming the file as a local
    buffer). ``dumps``/``loads`` paths are paths on the actor's node: by default the actor runs
    on the node of the process that builds it, so they are this machine's paths; the
    checkpoint format is the local buffer's (atomic, pickle-free). Data crossing to and from
    the actor is serialised by Ray.

    The actor is not restarted when it dies (a restarted buffer would be empty): a call then
    raises :class:`~tdrl.errors.WorkerError`; :meth:`dumps` regularly to keep the data. The
    buffer object can be passed to other Ray tasks and actors (it travels as a handle to the
    same actor; only the object that built the actor kills it in :meth:`close`).

    The signature is TorchRL's, plus tdrl's ``options``. ``transport`` accepts ``"auto"`` and
    ``"ray"``; ``transport_options`` and ``delayed_init`` are accepted at their defaults only.

    Args:
        *args: positional arguments of ``replay_buffer_cls``.
        replay_buffer_cls: the tdrl buffer class to build in the actor.
        ray_init_config: ``ray.init`` arguments, used when Ray is not initialised yet.
        remote_config: Ray actor options (``num_cpus``, ``resources``, ``scheduling_strategy``,
            ...). Default: ``num_cpus=0`` on the node of this process.
        transport, transport_options, delayed_init: TorchRL's; see above.
        options: timeouts (:class:`RayOptions`).
        **kwargs: keyword arguments of ``replay_buffer_cls``.

    Raises:
        ImportError: Ray is not installed (``pip install tdrl[ray]``).

    Examples:
        >>> from tensordict import TensorDict
        >>> from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> from tdrl.distributed import connect_ray
        >>> _ = connect_ray()  # a local Ray; connect_ray("auto") joins a running cluster
        >>> rb = RayReplayBuffer(
        ...     replay_buffer_cls=TensorDictReplayBuffer, storage=LazyTensorStorage(100), batch_size=4
        ... )
        >>> rb.extend(TensorDict(obs=torch.arange(10.0), batch_size=[10])).tolist()[:3]
        [0, 1, 2]
        >>> len(rb), rb.sample()["obs"].shape
        (10, torch.Size([4]))
        >>> rb.close()
    """

    def __init__(
        self,
        *args: Any,
        replay_buffer_cls: type[ReplayBuffer] = ReplayBuffer,
        ray_init_config: Mapping[str, Any] | None = None,
        remote_config: Mapping[str, Any] | None = None,
        transport: str = "auto",
        transport_options: Mapping[str, Any] | None = None,
        delayed_init: bool = False,
        options: RayOptions | None = None,
        **kwargs: Any,
    ) -> None:
        owner = "RayReplayBuffer.__init__"
        self._actor: Any = None
        self._owner = False
        _check_torchrl_args(owner, transport, transport_options, delayed_init)
        if not (
            isinstance(replay_buffer_cls, type) and issubclass(replay_buffer_cls, ReplayBuffer)
        ):
            raise TypeError(
                f"{owner}: replay_buffer_cls must be a tdrl ReplayBuffer class (got "
                f"{replay_buffer_cls!r}). Pass e.g. TensorDictReplayBuffer."
            )
        self.options = options or RayOptions()
        self.started_ray = connect(owner, ray_init_config, self.options.connect_timeout)
        config = actor_options(owner, "remote_config", remote_config, {"num_cpus": 0})
        config.setdefault("scheduling_strategy", _this_node())
        config["name"] = f"tdrl-buffer-{uuid.uuid4().hex[:8]}"
        self._actor = BufferActor.options(**config).remote(
            functools.partial(replay_buffer_cls, *args, **kwargs)
        )
        self._owner = True
        try:
            self._info = get(self._actor.setup.remote(), self.options.start_timeout, owner)
        except BaseException as err:
            self.close()
            if isinstance(err, ActorLost):
                raise self._died("__init__", err) from err.cause
            raise

    # ------------------------------------------------------------------ plumbing
    def _call(self, method: str, *args: Any, timeout: float | None = None, public: str = "") -> Any:
        """Runs ``method`` of the buffer actor (errors name ``public``, default ``method``)."""
        public = public or method
        where = f"RayReplayBuffer.{public}"
        if self._actor is None:
            raise RuntimeError(
                f"{where}: the buffer is closed (got a call after close()). Build a new "
                "RayReplayBuffer."
            )
        ref = getattr(self._actor, method).remote(*args)
        try:
            return get(ref, timeout or self.options.call_timeout, where)
        except ActorLost as err:
            raise self._died(public, err) from err.cause

    def _died(self, method: str, err: ActorLost) -> WorkerError:
        return WorkerError(
            f"RayReplayBuffer.{method}: the buffer actor is gone (got {err}; expected a live "
            "actor). Its content is lost: build a new RayReplayBuffer and loads() the last "
            "dumps()."
        )

    @property
    def actor(self) -> Any:
        """The Ray actor handle of the buffer (None after :meth:`close`)."""
        return self._actor

    def __reduce__(self) -> tuple[Any, ...]:
        return (_attach, (self._actor, self.options, self._info))

    # ------------------------------------------------------------------ buffer API
    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Adds a batch of elements in the actor; returns their flat indices (see
        :meth:`tdrl.data.ReplayBuffer.extend`)."""
        return self._call("extend", data, update_priority)

    def add(self, data: Any) -> Any:
        """Adds one element; returns its index (see :meth:`tdrl.data.ReplayBuffer.add`)."""
        return self._call("add", data)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Samples a batch in the actor (see :meth:`tdrl.data.ReplayBuffer.sample`)."""
        return self._call("sample", batch_size, return_info)

    def update_priority(self, index: Any, priority: Any) -> None:
        """Sets priorities of a prioritized buffer (see
        :meth:`tdrl.data.ReplayBuffer.update_priority`)."""
        self._call("update_priority", index, priority)

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Updates priorities from a sample that carries the loss's priority entry; only
        ``"index"`` and that entry are sent to the actor."""
        key = self._info.get("priority_key")
        if key is not None and isinstance(data, TensorDictBase):
            data = data.select("index", key, strict=False)
        self._call("update_tensordict_priority", data)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Writes the buffer's atomic, pickle-free checkpoint to ``path`` on the actor's node."""
        self._call("dumps", os.fspath(path), timeout=self.options.batch_timeout)

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Restores a checkpoint written by ``dumps`` (from ``path`` on the actor's node).

        Raises:
            CheckpointError: as a local buffer's ``loads``, naming the file.
        """
        self._call("loads", os.fspath(path), timeout=self.options.batch_timeout)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state (a copy taken in the actor)."""
        return self._call("state_dict", timeout=self.options.batch_timeout)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` into the actor's buffer."""
        self._call("load_state_dict", state_dict, timeout=self.options.batch_timeout)

    def empty(self, empty_write_count: bool = True) -> None:
        """Removes every element (see :meth:`tdrl.data.ReplayBuffer.empty`)."""
        self._call("empty", empty_write_count)

    def __len__(self) -> int:
        return int(self._call("length", public="__len__"))

    @property
    def write_count(self) -> int:
        """The number of elements written so far."""
        return int(self._call("write_count"))

    @property
    def batch_size(self) -> int | None:
        """The default batch size of :meth:`sample`."""
        return self._info.get("batch_size")

    def _write_once(self, writer: str, seq: int, data: Any, timeout: float) -> bool:
        """A collector's write: stored unless ``writer`` stored ``seq`` before."""
        ref = self._actor.write_once.remote(writer, seq, data)
        try:
            return bool(get(ref, timeout, "RayReplayBuffer.extend"))
        except ActorLost as err:
            raise self._died("extend", err) from err.cause

    def __repr__(self) -> str:
        state = "closed" if self._actor is None else f"pid {self._info.get('pid')}"
        return f"RayReplayBuffer({self._info.get('class')}, actor {state})"

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Kills the buffer actor, when this object built it; idempotent. Other copies of the
        object (passed to Ray actors) only drop their handle."""
        actor, self._actor = self._actor, None
        if actor is not None and self._owner and ray.is_initialized():
            with contextlib.suppress(Exception):
                get(actor.close.remote(), self.options.shutdown_timeout, "RayReplayBuffer.close")
            kill_and_wait([actor], self.options.shutdown_timeout)

    def __enter__(self) -> RayReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _attach(actor: Any, options: RayOptions, info: dict[str, Any]) -> RayReplayBuffer:
    """A copy of a :class:`RayReplayBuffer` that uses the same actor and does not own it."""
    rb = RayReplayBuffer.__new__(RayReplayBuffer)
    rb._actor, rb._owner, rb.options, rb._info = actor, False, options, info
    rb.started_ray = False
    return rb


def _this_node() -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _check_torchrl_args(owner: str, transport: Any, options: Any, delayed_init: Any) -> None:
    if transport not in ("auto", "ray"):
        raise ValueError(
            f"{owner}: transport={transport!r} is not supported by tdrl (got {transport!r}; "
            "expected 'auto' or 'ray'): data reaches the buffer actor through Ray. Leave "
            "transport at its default."
        )
    for name, value, default in (
        ("transport_options", options, None),
        ("delayed_init", delayed_init, False),
    ):
        if value is not default and value != default:
            raise ValueError(
                f"{owner}: {name}={value!r} is not supported by tdrl (got {value!r}; expected "
                f"{default!r}): the buffer is built in its actor at once. Leave {name} at its "
                "default."
            )
