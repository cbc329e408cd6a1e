"""RayReplayBuffer: a tdrl buffer in a Ray actor: priorities from the learner, the local
checkpoint format both ways, every refusal of the local loads, ownership and failures."""

from __future__ import annotations

import inspect
import pickle
import shutil

import pytest
import ray
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.distributed import RayReplayBuffer
from tdrl.errors import CheckpointError, WorkerError
from tdrl.testing._hostile import MARKER, buffer_cases

pytestmark = pytest.mark.timeout(120)

CAPACITY = 64


def _local():
    return TensorDictReplayBuffer(
        storage=LazyMemmapStorage(CAPACITY),
        sampler=PrioritizedSampler(CAPACITY, alpha=1.0, beta=1.0),
        batch_size=8,
    )


def _remote():
    return RayReplayBuffer(
        replay_buffer_cls=TensorDictReplayBuffer,
        storage=LazyMemmapStorage(CAPACITY),
        sampler=PrioritizedSampler(CAPACITY, alpha=1.0, beta=1.0),
        batch_size=8,
    )


def _data(n, start=0):
    obs = torch.arange(start, start + n, dtype=torch.float32)[:, None].expand(n, 3)
    return TensorDict({"obs": obs.clone(), "next": {"obs": obs + 1}}, [n])


def _same_state(a, b):
    flat_a = TensorDict(a["storage"]["data"]) if "data" in a["storage"] else None
    assert a["len"] == b["len"] and a["components"] == b["components"]
    if flat_a is not None:
        assert (flat_a == TensorDict(b["storage"]["data"])).all()


@pytest.fixture(scope="module")
def rb(ray_session):
    with _remote() as buffer:
        yield buffer


def test_priorities_set_by_the_learner_steer_sampling(rb):
    rb.empty()
    assert rb.extend(_data(8)).tolist() == list(range(8))
    sample = rb.sample()
    assert sample.batch_size == (8,) and "priority_weight" in sample.keys()
    sample["td_error"] = torch.where(sample["index"] == 5, 1e6, 1e-6)
    rb.update_tensordict_priority(sample)
    rb.update_priority(torch.tensor([5]), torch.tensor([1e6]))  # index 5 may not be in sample
    picked = torch.cat([rb.sample()["index"] for _ in range(5)])
    assert picked.tolist() == [5] * 40
    with pytest.raises(IndexError, match="index out of range"):
        rb.update_priority(torch.tensor([9]), torch.tensor([1.0]))  # the local error, as raised
    assert len(rb) == 8 and rb.write_count == 8 and rb.batch_size == 8


def test_dumps_and_loads_use_the_local_format_both_ways(rb, tmp_path):
    rb.empty()
    rb.extend(_data(10))
    rb.dumps(tmp_path / "remote")
    local = _local()
    local.loads(tmp_path / "remote")
    _same_state(local.state_dict(), rb.state_dict())
    local.extend(_data(5, start=100))
    local.dumps(tmp_path / "local")
    rb.loads(tmp_path / "local")
    assert len(rb) == 15
    _same_state(local.state_dict(), rb.state_dict())
    rb.load_state_dict(_local().state_dict())
    assert len(rb) == 0


def test_hostile_checkpoints_are_refused_exactly_as_locally(rb, tmp_path):
    original = _local()
    original.extend(_data(40))
    template = tmp_path / "template"
    original.dumps(template)
    cases = buffer_cases(template)
    assert len(cases) >= 70
    problems = []
    for i, case in enumerate(cases):
        work, outside = tmp_path / f"case{i}", tmp_path / f"outside{i}"
        outside.mkdir()
        shutil.copytree(template, work / "ckpt")
        case.mutate(work / "ckpt", outside)
        outcomes = []
        local = _local()
        for target in (local, rb):
            target.empty()
            target.extend(_data(5))
            try:
                target.loads(work / "ckpt")
                outcomes.append(("loaded", len(target)))
            except CheckpointError as err:
                outcomes.append((type(err).__name__, str(err)))
                assert len(target) == 5, case.name  # a refused checkpoint changes nothing
        if outcomes[0] != outcomes[1]:
            problems.append(f"{case.name}: local {outcomes[0]} != remote {outcomes[1]}")
        if (outside / MARKER).exists():
            problems.append(f"{case.name}: the pickle payload ran")
    assert not problems, "\n".join(problems)


def test_copies_share_the_actor_and_only_the_owner_kills_it(ray_session, kill_actor):
    owner = RayReplayBuffer(storage=LazyTensorStorage(8))
    assert owner.extend(torch.arange(3)).tolist() == [0, 1, 2]
    copy = pickle.loads(pickle.dumps(owner))
    copy.extend(torch.arange(2))
    copy.close()
    assert len(owner) == 5 and owner.write_count == 5
    assert ray.get(ray.remote(lambda b: len(b)).remote(owner), timeout=60) == 5
    owner.empty(empty_write_count=False)
    assert len(owner) == 0 and owner.write_count == 5
    kill_actor(owner.actor)
    with pytest.raises(WorkerError, match=r"RayReplayBuffer.__len__: the buffer actor is gone"):
        len(owner)
    owner.close()
    owner.close()
    with pytest.raises(RuntimeError, match="closed"):
        owner.sample(1)


def test_constructor_arguments_fail_as_for_a_local_buffer(ray_session):
    params = inspect.signature(RayReplayBuffer).parameters  # TorchRL 0.14.1's, then options
    assert list(params) == [
        "args",
        "replay_buffer_cls",
        "ray_init_config",
        "remote_config",
        "transport",
        "transport_options",
        "delayed_init",
        "options",
        "kwargs",
    ]
    assert params["replay_buffer_cls"].default is ReplayBuffer
    assert [params[k].default for k in ("transport", "transport_options", "delayed_init")] == [
        "auto",
        None,
        False,
    ]
    with pytest.raises(TypeError, match="must be a tdrl ReplayBuffer class"):
        RayReplayBuffer(replay_buffer_cls=dict)
    with pytest.raises(ValueError, match="transport='distributed' is not supported"):
        RayReplayBuffer(transport="distributed")
    with pytest.raises(ValueError, match="delayed_init=True is not supported"):
        RayReplayBuffer(delayed_init=True)
    with pytest.raises(ValueError, match="may not set 'max_restarts'"):
        RayReplayBuffer(remote_config={"max_restarts": 1})
    with pytest.raises(TypeError) as local:
        ReplayBuffer(storage="nope")
    with pytest.raises(TypeError) as remote:
        RayReplayBuffer(storage="nope")
    assert str(remote.value) == str(local.value)
