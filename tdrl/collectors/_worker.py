"""The worker side of the multi-process collectors.

The process machinery (command pipes, bounded waits on pipes and process sentinels, remote
tracebacks, the parent-death watchdog, bounded shutdown) is the batched envs' ``WorkerPool``;
this module only adds the worker target that runs a :class:`Collector` and the commands it
answers.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDictBase

from tdrl.collectors._collector import Collector
from tdrl.collectors._traj_ids import TRAJ_KEY, WORKER_KEY, is_traj_ids_key
from tdrl.collectors._weight_sync import WeightReceiver
from tdrl.envs.batched._process import WorkerOptions, run_worker
from tdrl.envs.core import EnvBase

__all__ = ["TRAJ_KEY", "WORKER_KEY", "WorkerSetup", "collector_worker_main"]


@dataclass
class WorkerSetup:
    """What a worker needs to build its collector (sent cloudpickled, policy by value)."""

    create_env_fn: Any
    policy: Any
    collector_kwargs: dict[str, Any]
    num_workers: int
    policy_factory: Any = None


def _dry_run(env: EnvBase, policy: Any, kwargs: dict[str, Any]) -> TensorDictBase:
    """One step of collection with the worker's settings: the layout of a batch, ``[*B, 1]``."""
    probe_kwargs = dict(
        kwargs,
        frames_per_batch=max(env.batch_size.numel(), 1),
        total_frames=-1,
        set_truncated=False,  # the layout only: no marks, no hooks, no compilation
        pre_collect_hook=None,
        compile_policy=None,
    )
    probe = Collector(env, policy, **probe_kwargs)
    layout = probe.rollout().clone()
    probe.shutdown()
    return layout


class _Server:
    """The commands a collector worker answers (``_serve`` calls them by name)."""

    def __init__(self, index: int, setup: WorkerSetup, receiver: WeightReceiver) -> None:
        self.index, self.num_workers = index, setup.num_workers
        env = setup.create_env_fn()
        self.env = env
        policy = setup.policy_factory() if setup.policy_factory is not None else setup.policy
        # the parent warns about frame counts (a worker's warnings would not reach the caller)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            # the dry run first: the collector then starts from its own reset of the env
            self.layout = _dry_run(env, policy, setup.collector_kwargs)
            self.collector = Collector(env, policy, **setup.collector_kwargs)
        # the policy the collector runs (a copy when it moved it to policy_device)
        receiver.attach(self.collector.policy)
        self.receiver = receiver
        self._row: TensorDictBase | None = None
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._ids: list[torch.Tensor] = []

    def attach(self, buffer: TensorDictBase) -> None:
        """Takes this worker's row of the shared ``[num_workers, *B, T]`` batch buffer."""
        self._row = buffer[self.index]

    def _bind(self, batch: TensorDictBase) -> None:
        row = self._row
        assert row is not None
        pairs = []
        for key in batch.keys(True, True):
            dst = row.get(key, None)
            src = batch.get(key)
            if dst is None or dst.shape != src.shape or dst.dtype != src.dtype:
                raise KeyError(
                    f"MultiCollector worker {self.index}: batch entry {key!r} does not fit the "
                    f"shared buffer (got {tuple(src.shape)} {src.dtype}; buffer keys: "
                    f"{sorted(map(str, row.keys(True, True)))}). The policy or env wrote other "
                    "keys than in the dry run: write the same keys at every step."
                )
            pairs.append((src, dst))
        self._pairs = pairs
        self._ids = [row.get(k) for k in row.keys(True, True) if is_traj_ids_key(k)]

    def collect(self, message: Any) -> None:
        """Applies pending weights, collects one batch and copies it into the shared row."""
        self.receiver.receive(message)
        batch = self.collector.rollout()
        if self.collector.post_collect_hook is not None:
            self.collector.post_collect_hook(batch)
        if self._pairs is None:
            self._bind(batch)
        assert self._pairs is not None
        for src, dst in self._pairs:
            dst.copy_(src)
        # interleave the ids: worker w owns the ids congruent to w modulo num_workers
        for ids in self._ids:
            ids.mul_(self.num_workers).add_(self.index)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        # each worker process seeds its own torch generator too: the workers would otherwise
        # share the parent's stream (fork) or torch's default seed (spawn) and draw the same
        # exploration noise
        torch.manual_seed(seed)
        return int(self.collector.set_seed(seed, static_seed))

    def reset(self) -> None:
        self.collector.reset()

    def state_dict(self) -> dict[str, Any]:
        return self.collector.state_dict()

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        self.collector.load_state_dict(state, strict=strict)

    def close(self) -> None:
        self.collector.shutdown()
        self.env.close()


def collector_worker_main(
    index: int, conn: Any, options: WorkerOptions, payload: bytes, receiver: WeightReceiver
) -> None:
    """Entry point of a collector worker (a ``WorkerPool`` target): build env, policy and
    collector, report the batch layout, serve commands."""

    def build() -> tuple[_Server, TensorDictBase]:
        server = _Server(index, cloudpickle.loads(payload), receiver)
        return server, server.layout

    run_worker(conn, options, build)
