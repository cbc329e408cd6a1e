"""Collectors: run a policy in envs and yield batches (or fill a replay buffer)."""

from tdrl.collectors._async import AsyncCollector
from tdrl.collectors._base import BaseCollector
from tdrl.collectors._buffer import RolloutBuffer
from tdrl.collectors._collector import Collector
from tdrl.collectors._multi import MultiCollectorOptions
from tdrl.collectors._multi_async import MultiAsyncCollector
from tdrl.collectors._multi_sync import MultiSyncCollector
from tdrl.collectors._primers import add_policy_primers
from tdrl.collectors._split import split_trajectories
from tdrl.collectors._weight_sync import (
    MultiProcessWeightSyncScheme,
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightReceiver,
    WeightSyncScheme,
)
from tdrl.envs.core import RandomPolicy

__all__ = [
    "AsyncCollector",
    "BaseCollector",
    "Collector",
    "MultiAsyncCollector",
    "MultiCollectorOptions",
    "MultiProcessWeightSyncScheme",
    "MultiSyncCollector",
    "NoWeightSyncScheme",
    "RandomPolicy",
    "RolloutBuffer",
    "SharedMemWeightSyncScheme",
    "WeightReceiver",
    "WeightSyncScheme",
    "add_policy_primers",
    "split_trajectories",
]
