"""RayCollector restarts: actors killed between batches and while a batch is in flight, a
crashing env, a collector killed after its batch was stored but before it reported it, and a
lost node. Training goes on; no batch is lost or delivered twice; the buffer keeps its data."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import threading

import pytest
import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tdrl.data import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from tdrl.distributed import RayCollector, RayReplayBuffer
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(180)


class _Crash(CountingEnv):
    """Ends its actor at step ``at`` of its first life (a marker file remembers it): ``"exit"``
    exits the process, ``"kill"`` calls ``ray.kill`` on its own actor with the batch in flight."""

    def __init__(self, marker, at, how, **kwargs):
        super().__init__(**kwargs)
        self.marker, self.at, self.how, self.steps = marker, at, how, 0

    def _step(self, td):
        self.steps += 1
        if self.steps == self.at and not os.path.exists(self.marker):
            open(self.marker, "x").close()
            if self.how == "exit":
                os._exit(1)
            ray.kill(ray.get_runtime_context().current_actor)
            threading.Event().wait(60)  # the kill lands before the batch can end
        return super()._step(td)


class _KillWriterBuffer(TensorDictReplayBuffer):
    """Kills collector actor 1 just after storing its second batch and before the actor can
    report it to its driver (once: a marker file remembers it)."""

    def __init__(self, marker, **kwargs):
        super().__init__(**kwargs)
        self.marker, self.from_actor_1 = marker, 0

    def extend(self, data, **kwargs):
        index = super().extend(data, **kwargs)
        self.from_actor_1 += bool((data["collector", "worker_id"] == 1).all())
        if self.from_actor_1 == 2 and not os.path.exists(self.marker):
            open(self.marker, "x").close()
            (name,) = [n for n in ray.util.list_named_actors() if n.endswith("-1-g0")]
            victim = ray.get_actor(name)
            ray.kill(victim)
            with contextlib.suppress(ray.exceptions.RayActorError):
                ray.get(victim.reset.remote(), timeout=60)  # queued after collect: fails once dead
        return index


def _env():
    return CountingEnv(batch_size=(2,), max_steps=3)


def _ids(data):
    return set(data["collector", "traj_ids"].flatten().tolist())


def _owners_are_unique(data):
    """Every trajectory id belongs to one actor."""
    ids = data["collector", "traj_ids"].flatten()
    workers = data["collector", "worker_id"].flatten()
    for traj in ids.unique():
        assert workers[ids == traj].unique().numel() == 1, int(traj)


def test_lost_actors_are_restarted_and_their_batch_collected_again(
    ray_session, tmp_path, caplog, kill_actor
):
    caplog.set_level(logging.WARNING, logger="tdrl.distributed")
    crash = functools.partial(_Crash, str(tmp_path / "exited"), 5, "exit", batch_size=(2,))
    collector = RayCollector(
        [_env, crash], frames_per_batch=8, total_frames=48, sync=True, max_restarts=1
    )
    with collector:
        batches = []
        for i, batch in enumerate(collector):
            batches.append(batch)
            if i == 1:
                kill_actor(collector.remote_collectors[0])  # between batches
        # actor 1's env exited at its 5th step: the first step of the third batch
        assert os.path.exists(tmp_path / "exited")
        assert len(batches) == 6 and collector.frames == 48
        assert collector.restarts == [1, 1] and collector.num_restarts == 2
        lines = [r.getMessage() for r in caplog.records if r.name == "tdrl.distributed"]
        assert any("actor 0 was lost" in m and "restart 1 of 1" in m for m in lines), lines
        assert any("actor 1 was lost" in m and "restart 1 of 1" in m for m in lines), lines
        # the third batch was collected again by both new actors, from fresh envs
        assert batches[2]["observation"][..., 0].tolist() == [[[0.0, 1.0]] * 2] * 2
        before = set().union(*(_ids(b) for b in batches[:2]))
        assert before.isdisjoint(set().union(*(_ids(b) for b in batches[2:])))
        _owners_are_unique(torch.stack(batches))
        kill_actor(collector.remote_collectors[0])
        collector.total_frames += 8
        with pytest.raises(WorkerError, match=r"actor 0 was lost .*max_restarts=1"):
            next(iter(collector))


def test_remote_writes_survive_kills_at_the_worst_moments(ray_session, tmp_path):
    rb = RayReplayBuffer(
        replay_buffer_cls=_KillWriterBuffer,
        marker=str(tmp_path / "writer-killed"),
        storage=LazyTensorStorage(1000),
        sampler=SamplerWithoutReplacement(),
    )
    in_flight = functools.partial(_Crash, str(tmp_path / "self-killed"), 6, "kill")
    collector = RayCollector(
        [in_flight, CountingEnv],
        frames_per_batch=4,
        total_frames=40,
        replay_buffer=rb,
        postproc=lambda td: td.set("seen", td["observation"] * 2),  # runs in the actors
    )
    with rb, collector:
        assert list(collector) == [None] * 10
        assert collector.frames == 40 and collector.restarts == [1, 1]
        assert os.path.exists(tmp_path / "writer-killed")
        assert os.path.exists(tmp_path / "self-killed")
        # every batch stored once: the batch stored before its actor died is not stored again
        assert len(rb) == 40 and rb.write_count == 40
        data = rb.sample(40)
        assert sorted(data["index"].tolist()) == list(range(40))
        _owners_are_unique(data)
        assert (data["seen"] == data["observation"] * 2).all()
        counts = torch.bincount(data["collector", "worker_id"], minlength=2)
        assert counts.sum() == 40 and (counts % 4 == 0).all()


def test_a_lost_node_does_not_stop_training_and_the_buffer_keeps_its_data(ray_session):
    node = ray_session.add_node(num_cpus=2)
    removed = False
    try:
        on_node = NodeAffinitySchedulingStrategy(node.node_id, soft=True)
        rb = RayReplayBuffer(
            replay_buffer_cls=TensorDictReplayBuffer,
            storage=LazyTensorStorage(1000),
            sampler=SamplerWithoutReplacement(),
        )
        collector = RayCollector(
            _env,
            num_collectors=2,
            frames_per_batch=8,
            total_frames=48,
            sync=True,
            replay_buffer=rb,
            remote_configs=[{"num_cpus": 1}, {"num_cpus": 1, "scheduling_strategy": on_node}],
        )
        with rb, collector:
            assert collector.actor_nodes[1] == node.node_id != collector.actor_nodes[0]
            it = iter(collector)
            assert list(itertools.islice(it, 2)) == [None, None]
            ray_session.remove_node(node)
            removed = True
            assert list(it) == [None] * 4
            assert collector.restarts == [0, 1] and collector.actor_nodes[1] != node.node_id
            assert len(rb) == 48 and rb.write_count == 48
            data = rb.sample(48)
            # actor 1's first batches, written from the lost node, are still there
            assert torch.bincount(data["collector", "worker_id"]).tolist() == [24, 24]
            _owners_are_unique(data)
    finally:
        if not removed:
            ray_session.remove_node(node)
