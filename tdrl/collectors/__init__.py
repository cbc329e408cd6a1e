"""Collectors: run a policy in envs and yield batches (or fill a replay buffer)."""

from tdrl.collectors._buffer import RolloutBuffer
from tdrl.collectors._collector import Collector
from tdrl.collectors._split import split_trajectories

__all__ = ["Collector", "RolloutBuffer", "split_trajectories"]
