"""The Ray actor of :class:`RayCollector`: one local tdrl collector that collects on request."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from tdrl.collectors import split_trajectories
from tdrl.collectors._traj_ids import TRAJ_KEY, WORKER_KEY, is_traj_ids_key
from tdrl.distributed._ray import ray
from tdrl.distributed._wire import pack

__all__ = [
    "TRAJ_KEY",
    "VERSION_KEY",
    "WORKER_KEY",
    "ActorSpec",
    "CollectorActor",
    "CollectorServer",
]

VERSION_KEY = ("collector", "policy_version")


@dataclass
class ActorSpec:
    """What every collector actor is built from (put in the object store once, so that a
    restarted actor is built from the same env factories and policy as the first one).

    ``id_stride``/``id_offsets``: actor ``w`` of generation ``g`` turns the local trajectory id
    ``i`` into ``i * id_stride + g * num_actors + w``; ids never collide across actors and
    restarts.
    """

    collector_class: type
    create_env_fns: list[Any]
    policy: Any
    policy_factories: list[Any]
    collector_kwargs: list[dict[str, Any]]
    num_actors: int
    id_stride: int
    buffer: Any = None  # a RayReplayBuffer: batches are written there instead of returned
    writer: str = ""
    write_timeout: float = 300.0
    split_trajs: bool = False
    postproc: Callable[[TensorDictBase], TensorDictBase] | None = None


class CollectorServer:
    """Runs one tdrl collector inside a Ray actor (see :class:`RayCollector`)."""

    def __init__(self, spec: ActorSpec, index: int, generation: int) -> None:
        self.spec, self.index, self.generation = spec, index, generation
        self.collector: Any = None
        self._it: Iterator[Any] | None = None
        self._id_keys: list[Any] | None = None
        self.version = 0

    def setup(self, seed: int | None) -> dict[str, Any]:
        """Builds the env, the policy and the collector (a Python error reaches the driver as
        it is; the actor stays alive)."""
        spec, w = self.spec, self.index
        factory = spec.policy_factories[w]
        kwargs = dict(spec.collector_kwargs[w], total_frames=-1)
        policy = None if factory is not None else spec.policy
        self.collector = spec.collector_class(
            spec.create_env_fns[w], policy, policy_factory=factory, **kwargs
        )
        if seed is not None:
            self.set_seed(seed, False)
        self._it = iter(self.collector)
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def collect(self, seq: int, version: int, weights: Any) -> tuple[dict[str, Any], Any]:
        """Loads ``weights`` (version ``version``) when given, collects one batch and returns
        ``(info, batch)`` (the batch packed for the object store, see ``_wire``); with a remote
        buffer the batch is written there as sequence ``seq`` of this collector and ``None``
        comes back instead."""
        if weights is not None:
            self.collector.update_policy_weights_(weights)
            self.version = version
        assert self._it is not None
        batch = next(self._it)
        self._tag(batch)
        info = {"seq": seq, "version": self.version, "frames": batch.numel()}
        spec = self.spec
        if spec.buffer is None:
            return info, pack(batch)
        if spec.split_trajs:
            batch = split_trajectories(batch)
        if spec.postproc is not None:
            batch = spec.postproc(batch)
        info["stored"] = spec.buffer._write_once(
            f"{spec.writer}/{self.index}", seq, batch.reshape(-1), spec.write_timeout
        )
        return info, None

    def _tag(self, batch: TensorDictBase) -> None:
        """Makes the trajectory ids unique over actors and restarts, and writes the actor index
        and the policy version into the batch."""
        if self._id_keys is None:
            self._id_keys = [k for k in batch.keys(True, True) if is_traj_ids_key(k)]
        spec = self.spec
        offset = self.generation * spec.num_actors + self.index
        for key in self._id_keys:
            batch.get(key).mul_(spec.id_stride).add_(offset)
        shape = batch.batch_size
        batch.set(WORKER_KEY, torch.full(shape, self.index, dtype=torch.long))
        batch.set(VERSION_KEY, torch.full(shape, self.version, dtype=torch.long))

    def set_seed(self, seed: int, static_seed: bool) -> int:
        """Seeds the collector's envs and this actor process's global torch and numpy
        generators (the random actions and the policy's noise draw from them), as TorchRL's
        collector worker processes do: ``Collector.set_seed`` leaves them alone, and every
        fresh actor process would otherwise start from the same default seed."""
        out = int(self.collector.set_seed(seed, static_seed))
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        return out

    def reset(self) -> None:
        self.collector.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"collector": self.collector.state_dict(), "policy_version": self.version}

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        self.collector.load_state_dict(state["collector"], strict=strict)
        self.version = int(state.get("policy_version", self.version))

    def close(self) -> None:
        if self.collector is not None:
            self.collector.shutdown()


CollectorActor = ray.remote(CollectorServer)
