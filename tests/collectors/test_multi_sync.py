"""MultiSyncCollector: layout, trajectory ids, seeds, state, post-processing and spawn."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import (
    AsyncCollector,
    MultiAsyncCollector,
    MultiCollectorOptions,
    MultiSyncCollector,
)
from tdrl.envs import PendulumV1Env
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


def _counting(max_steps=3):
    return lambda: CountingEnv(batch_size=(2,), max_steps=max_steps)


def test_batches_stack_the_workers_and_continue_across_batches():
    with MultiSyncCollector(
        [_counting()] * 2, frames_per_batch=16, total_frames=40, mp_start_method="fork"
    ) as collector:
        batches = [b.clone() for b in collector]
        assert collector.frames == 48
    assert [b.batch_size for b in batches] == [torch.Size([2, 2, 4])] * 3
    data = torch.cat(batches, dim=-1)  # [worker, env, 12]
    obs = data["observation"][..., 0]
    assert obs[0, 0].tolist() == [0, 1, 2] * 4
    ids, done = data["collector", "traj_ids"], data["next", "done"][..., 0]
    assert torch.equal(
        data["collector", "worker_id"], torch.arange(2).reshape(2, 1, 1).expand(ids.shape)
    )
    # a trajectory keeps its id until done; fresh ids afterwards; worker w owns ids = w mod 2
    assert torch.equal(ids[..., 1:][~done[..., :-1]], ids[..., :-1][~done[..., :-1]])
    assert (ids[..., 1:][done[..., :-1]] != ids[..., :-1][done[..., :-1]]).all()
    assert torch.equal(ids % 2, data["collector", "worker_id"])
    per_traj = {}
    for i, o in zip(ids.flatten().tolist(), obs.flatten().tolist()):
        per_traj.setdefault(i, []).append(o)
    assert all(v == [0, 1, 2][: len(v)] for v in per_traj.values())  # ids never reused


def test_frames_per_batch_is_rounded_up_over_workers_and_envs_as_torchrl():
    with pytest.warns(UserWarning, match="not a multiple of the number of workers"):
        with MultiSyncCollector(
            [CountingEnv] * 2, frames_per_batch=5, total_frames=12, mp_start_method="fork"
        ) as collector:
            assert collector.requested_frames_per_batch == 6
            assert [b.batch_size for b in collector] == [torch.Size([2, 3])] * 2
    # 10 frames over 2 workers of 2 envs: each worker batch holds 6 frames
    with pytest.warns(UserWarning, match="not a multiple of the env batch numel"):
        with MultiSyncCollector(
            [_counting()] * 2, frames_per_batch=10, total_frames=12, mp_start_method="fork"
        ) as collector:
            assert collector.requested_frames_per_batch == 12
            assert [b.batch_size for b in collector] == [torch.Size([2, 2, 3])]


def test_frames_per_batch_must_be_positive_and_env_fns_callables():
    with pytest.raises(ValueError, match="frames_per_batch must be a positive int"):
        MultiSyncCollector([CountingEnv] * 2, frames_per_batch=0, mp_start_method="fork")
    with pytest.raises(TypeError, match="list of callables"):
        MultiSyncCollector([CountingEnv()], frames_per_batch=4, mp_start_method="fork")
    with pytest.raises(ValueError, match="mp_start_method"):
        MultiSyncCollector([CountingEnv], frames_per_batch=4, mp_start_method="thread")
    with pytest.raises(ValueError, match="batch_timeout"):
        MultiSyncCollector(
            [CountingEnv],
            frames_per_batch=4,
            options=MultiCollectorOptions(batch_timeout=float("inf")),
        )


def test_seeds_are_distinct_per_worker_and_reproducible():
    def run():
        with MultiSyncCollector(
            [lambda: PendulumV1Env(batch_size=(2,))] * 2,
            frames_per_batch=8,
            total_frames=8,
            mp_start_method="fork",
        ) as collector:
            assert collector.set_seed(7) > 7
            return next(iter(collector))["observation"].clone()

    first, second = run(), run()
    assert torch.equal(first, second)
    assert not torch.allclose(first[0], first[1])


def test_split_trajs_postproc_and_replay_buffer():
    class Sink:
        def __init__(self):
            self.items = []

        def extend(self, data):
            self.items.append(data.clone())

    sink = Sink()
    with MultiSyncCollector(
        [_counting(3)] * 2,
        frames_per_batch=16,
        total_frames=16,
        split_trajs=True,
        postproc=lambda b: b.set("seen", torch.ones(b.batch_size)),
        replay_buffer=sink,
        mp_start_method="fork",
    ) as collector:
        assert list(collector) == [None]
    (data,) = sink.items
    # 4 envs x 4 steps with max_steps=3: each env has one full and one 1-step trajectory
    assert data.shape == (8 * 3,)
    assert int(data["collector", "mask"].sum()) == 16 and bool(data["seen"].all())


def test_state_dict_round_trip():
    with MultiSyncCollector(
        [_counting(100)] * 2, frames_per_batch=8, total_frames=16, mp_start_method="fork"
    ) as collector:
        last = [b.clone() for b in collector][-1]
        state = collector.state_dict()
    assert state["frames"] == 16 and len(state["workers"]) == 2
    with MultiSyncCollector(
        [_counting(100)] * 2, frames_per_batch=8, total_frames=24, mp_start_method="fork"
    ) as other:
        other.load_state_dict(state)
        (batch,) = list(other)
    # the trajectory counters continue: the new ids are above every id seen before
    assert batch["collector", "traj_ids"].min() > last["collector", "traj_ids"].max()


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.zeros(1))

    def forward(self, obs):
        return (obs * 0 + self.scale).clamp(0, 1)


@pytest.mark.timeout(120)
def test_spawn_with_lambdas_and_a_policy():
    policy = TensorDictModule(_Scale(), in_keys=["observation"], out_keys=["action"])
    with MultiSyncCollector(
        [lambda: CountingEnv(batch_size=(2,))],
        policy,
        frames_per_batch=4,
        total_frames=8,
        mp_start_method="spawn",
        storing_device="cpu",
    ) as collector:
        actions = []
        for batch in collector:
            actions.append(batch["action"].unique().tolist())
            with torch.no_grad():
                policy.module.scale.fill_(0.5)
            collector.update_policy_weights_()
    assert actions == [[0.0], [0.5]]


def test_set_seed_resets_the_workers_envs_as_torchrl():
    with MultiSyncCollector(
        [lambda: CountingEnv(max_steps=100)] * 2,
        frames_per_batch=6,
        total_frames=12,
        mp_start_method="fork",
    ) as collector:
        it = iter(collector)
        assert next(it)["observation"][0, :, 0].tolist() == [0, 1, 2]
        collector.set_seed(3)  # TorchRL's multi collectors reset after seeding
        assert next(it)["observation"][0, :, 0].tolist() == [0, 1, 2]


def test_a_lazy_policy_is_materialised_and_shared_with_the_workers():
    policy = TensorDictModule(torch.nn.LazyLinear(1), ["observation"], ["action"])
    with MultiSyncCollector(
        [lambda: CountingEnv(max_steps=100)] * 2,
        policy,
        frames_per_batch=4,
        total_frames=8,
        mp_start_method="fork",
    ) as collector:
        assert policy.module.weight.shape == (1, 1)  # run here, on the env's zeros
        it = iter(collector)
        first = next(it)
        obs = first["observation"]
        expected = obs * policy.module.weight.detach() + policy.module.bias.detach()
        assert torch.allclose(first["action"], expected)  # every worker has these weights
        with torch.no_grad():
            policy.module.weight.fill_(2.0)
            policy.module.bias.fill_(0.0)
        collector.update_policy_weights_()
        second = next(it)
    assert torch.allclose(second["action"], 2 * second["observation"])


@pytest.mark.parametrize("limit", [-1, 3])
@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector, AsyncCollector])
def test_max_frames_per_traj_reaches_the_workers(cls, limit):
    fns = [lambda: CountingEnv(max_steps=100)] * (1 if cls is AsyncCollector else 2)
    with cls(
        fns[0] if cls is AsyncCollector else fns,
        frames_per_batch=8 if cls is MultiSyncCollector else 4,
        total_frames=8,
        max_frames_per_traj=limit,
        mp_start_method="fork",
    ) as collector:
        batch = next(iter(collector)).reshape(-1, 4)[0]  # one worker's 4 steps
    if limit < 0:  # no limit, no step counter
        assert batch["observation"][:, 0].tolist() == [0, 1, 2, 3]
        assert "step_count" not in batch.keys()
    else:
        assert batch["observation"][:, 0].tolist() == [0, 1, 2, 0]
        assert batch["next", "step_count"][:, 0].tolist() == [1, 2, 3, 1]
