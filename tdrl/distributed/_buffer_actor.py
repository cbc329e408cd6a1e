"""The Ray actor that holds a replay buffer (the server side of :class:`RayReplayBuffer`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from tdrl.data import ReplayBuffer
from tdrl.distributed._ray import ray

__all__ = ["BufferActor", "BufferServer"]


class BufferServer:
    """Holds one tdrl replay buffer and answers its clients, one call at a time.

    Collectors write through :meth:`write_once`: each batch comes with its writer's name and a
    sequence number, and a sequence the writer already stored is dropped. A collector actor
    that died after its batch was stored, but before its driver learnt it, is restarted and
    sends the same sequence again: the batch is stored once.
    """

    def __init__(self, make: Callable[[], ReplayBuffer]) -> None:
        self._make = make
        self.rb: ReplayBuffer | None = None
        self._last: dict[str, int] = {}  # writer -> the newest sequence it stored

    def setup(self) -> dict[str, Any]:
        """Builds the buffer (a separate call, so a constructor error reaches the caller)."""
        rb = self._make()
        if not isinstance(rb, ReplayBuffer):
            raise TypeError(
                f"RayReplayBuffer.__init__: replay_buffer_cls built a {type(rb).__name__} "
                "(expected a tdrl ReplayBuffer). Pass a tdrl buffer class."
            )
        self.rb = rb
        return {
            "class": type(rb).__name__,
            "batch_size": rb.batch_size,
            "priority_key": getattr(rb, "priority_key", None),
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
        }

    def _buffer(self) -> ReplayBuffer:
        assert self.rb is not None
        return self.rb

    def write_once(self, writer: str, seq: int, data: Any) -> bool:
        """Extends the buffer with ``data`` unless ``writer`` stored ``seq`` already; returns
        whether it was stored now."""
        if seq <= self._last.get(writer, -1):
            return False
        self._buffer().extend(data)
        self._last[writer] = seq
        return True

    def extend(self, data: Any, update_priority: bool | None) -> torch.Tensor:
        rb = self._buffer()
        if update_priority is None:
            return rb.extend(data)
        return rb.extend(data, update_priority=update_priority)

    def add(self, data: Any) -> Any:
        return self._buffer().add(data)

    def sample(self, batch_size: int | None, return_info: bool) -> Any:
        return self._buffer().sample(batch_size, return_info)

    def update_priority(self, index: Any, priority: Any) -> None:
        self._buffer().update_priority(index, priority)

    def update_tensordict_priority(self, data: Any) -> None:
        self._buffer().update_tensordict_priority(data)  # type: ignore[attr-defined]

    def dumps(self, path: str) -> None:
        self._buffer().dumps(path)

    def loads(self, path: str) -> None:
        self._buffer().loads(path)

    def state_dict(self) -> dict[str, Any]:
        # Ray serialises the answer as this call returns: later writes cannot reach it
        return self._buffer().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._buffer().load_state_dict(state)

    def empty(self, empty_write_count: bool) -> None:
        self._buffer().empty(empty_write_count)

    def length(self) -> int:
        return len(self._buffer())

    def write_count(self) -> int:
        return self._buffer().write_count

    def describe(self) -> str:
        return repr(self._buffer())

    def close(self) -> None:
        if self.rb is not None:
            self.rb.close()


BufferActor = ray.remote(BufferServer)
