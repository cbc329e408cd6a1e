"""start()/async_shutdown(): background collection into a replay buffer (TorchRL's), and the
exploration type every place a collector runs the policy (batches, workers, the thread)."""

from __future__ import annotations

import threading

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.collectors import Collector, MultiSyncCollector
from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import PendulumV1Env, set_exploration_type
from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal
from tdrl.testing import CountingEnv, FailingEnv

pytestmark = pytest.mark.timeout(60)


def _pendulum() -> PendulumV1Env:
    return PendulumV1Env(batch_size=[2])


def _actor() -> ProbabilisticActor:
    torch.manual_seed(0)
    net = nn.Sequential(MLP(3, 2, num_cells=[8]), NormalParamExtractor())
    module = TensorDictModule(net, ["observation"], ["loc", "scale"])
    return ProbabilisticActor(module, ["loc", "scale"], distribution_class=TanhNormal)


def _deterministic(actor: ProbabilisticActor, data) -> bool:
    """Whether the actions of ``data`` are the actor's deterministic ones."""
    with set_exploration_type("deterministic"):
        expected = actor(data.select("observation").clone())["action"]
    return torch.allclose(expected, data["action"])


def _buffer() -> ReplayBuffer:
    return ReplayBuffer(storage=LazyTensorStorage(1000))


@pytest.mark.parametrize(("kind", "deterministic"), [("random", False), ("deterministic", True)])
def test_batches_run_the_policy_under_the_exploration_type(kind, deterministic):
    actor = _actor()
    collector = Collector(_pendulum(), actor, frames_per_batch=8, exploration_type=kind)
    assert _deterministic(actor, collector.rollout()) is deterministic


@pytest.mark.parametrize(("kind", "deterministic"), [("random", False), ("deterministic", True)])
def test_workers_run_the_policy_under_the_exploration_type(kind, deterministic):
    actor = _actor()
    with MultiSyncCollector(
        [_pendulum] * 2,
        actor,
        frames_per_batch=16,
        total_frames=16,
        exploration_type=kind,
        mp_start_method="fork",
    ) as collector:
        (batch,) = list(collector)
    assert _deterministic(actor, batch) is deterministic


def test_start_needs_a_replay_buffer():
    with pytest.raises(RuntimeError, match="replay_buffer=None"):
        Collector(CountingEnv(), frames_per_batch=2).start()


def test_start_collects_into_the_buffer_until_total_frames():
    actor, buffer = _actor(), _buffer()
    collector = Collector(
        _pendulum(), actor, frames_per_batch=8, total_frames=24, replay_buffer=buffer
    )
    collector.start()
    assert collector._thread is not None
    collector._thread.join(30)
    assert not collector.is_running()
    assert len(buffer) == 24 and collector.frames == 24
    assert not _deterministic(actor, buffer[:])  # the thread runs the policy under RANDOM
    collector.async_shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.rollout()


def _gate(collector_batches: int):
    """A post_collect_hook that signals after ``collector_batches`` batches, then holds the
    collecting thread until released."""
    reached, release = threading.Event(), threading.Event()
    seen = []

    def hook(batch):
        seen.append(batch.numel())
        if len(seen) >= collector_batches:
            reached.set()
            release.wait(30)

    return hook, reached, release


def test_async_shutdown_stops_an_endless_collection():
    hook, reached, release = _gate(2)
    buffer = _buffer()
    collector = Collector(
        CountingEnv(max_steps=100), frames_per_batch=4, replay_buffer=buffer, post_collect_hook=hook
    )
    collector.start()
    collector.start()  # running already: nothing happens
    assert reached.wait(30) and collector.is_running()
    with pytest.raises(RuntimeError, match="collects in the background"):
        iter(collector)
    release.set()
    collector.async_shutdown(timeout=30)
    assert not collector.is_running()
    assert len(buffer) % 4 == 0 and len(buffer) >= 8


def test_shutdown_stops_the_background_thread():
    hook, reached, release = _gate(1)
    collector = Collector(
        CountingEnv(max_steps=100),
        frames_per_batch=4,
        replay_buffer=_buffer(),
        post_collect_hook=hook,
    )
    collector.start()
    assert reached.wait(30)
    release.set()
    collector.shutdown(timeout=30)
    assert not collector.is_running()


def test_a_failure_in_the_background_is_raised_by_async_shutdown():
    collector = Collector(FailingEnv(fail_after=6), frames_per_batch=4, replay_buffer=_buffer())
    collector.start()
    assert collector._thread is not None
    collector._thread.join(30)
    assert not collector.is_running()
    with pytest.raises(RuntimeError):
        collector.async_shutdown()


def test_multi_sync_start_collects_into_the_buffer():
    buffer = _buffer()
    collector = MultiSyncCollector(
        [CountingEnv] * 2,
        frames_per_batch=8,
        total_frames=32,
        replay_buffer=buffer,
        mp_start_method="fork",
    )
    collector.start()
    assert collector._thread is not None
    collector._thread.join(30)
    assert len(buffer) == 32
    collector.async_shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.reset()
