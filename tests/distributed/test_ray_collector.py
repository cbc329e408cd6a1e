"""RayCollector: the iteration contract of the local multi collectors, weights with versions,
states, failures and TorchRL's arguments (Ray actors on the session's Ray cluster)."""

from __future__ import annotations

import inspect
import itertools

import pytest
import ray
import torch

from tdrl.collectors import MultiSyncCollector
from tdrl.data import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from tdrl.distributed import RayCollector
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv, FailingEnv, set_policy_version, version_policy

pytestmark = pytest.mark.timeout(120)

MAX_STEPS = 3  # CountingEnv: observations 0, 1, 2, then the step to 3 terminates


def _env():
    return CountingEnv(batch_size=(2,), max_steps=MAX_STEPS)


def _reference_observations(steps):
    """The observations of one env member over ``steps`` steps, with the raw env API."""
    env = CountingEnv(max_steps=MAX_STEPS)
    td, seen = env.reset(), []
    for _ in range(steps):
        seen.append(td["observation"].item())
        td = env.maybe_reset(env.step_mdp(env.step(env.rand_action(td))))
    return seen


def _streams(batches, time_dim):
    """``{(worker, env): [(traj id, done), ...]}`` over the batches, in collection order."""
    out = {}
    for batch in batches:
        ids = batch["collector", "traj_ids"].movedim(time_dim, -1)
        done = batch["next", "done"][..., 0].movedim(time_dim, -1)
        workers = batch["collector", "worker_id"].movedim(time_dim, -1)
        for row in range(ids.reshape(-1, ids.shape[-1]).shape[0]):
            flat = ids.reshape(-1, ids.shape[-1])[row]
            w = int(workers.reshape(-1, ids.shape[-1])[row, 0])
            key = (w, row % 2)
            pairs = zip(flat.tolist(), done.reshape(-1, ids.shape[-1])[row].tolist())
            out.setdefault(key, []).extend(pairs)
    return out


def check_traj_ids(streams):
    """Each stream's id changes exactly after a done, and no id is shared by two streams."""
    owner = {}
    for key, steps in streams.items():
        for (prev, done), (cur, _) in itertools.pairwise(steps):
            assert (cur != prev) == done, (key, steps)
        for traj, _ in steps:
            assert owner.setdefault(traj, key) == key, f"id {traj} used by {owner[traj]} and {key}"


@pytest.fixture(scope="module")
def sync_pair(ray_session):
    policy = version_policy()
    collector = RayCollector(
        _env, policy, num_collectors=2, frames_per_batch=8, sync=True, max_restarts=1
    )
    yield collector, policy
    collector.shutdown()


def test_sync_batches_stack_every_actor_as_multisync(sync_pair):
    collector, _ = sync_pair
    collector.reset()
    batches = list(itertools.islice(collector, 3))
    assert all(b.batch_size == (2, 2, 2) for b in batches)  # [actors, envs, T]
    obs = torch.cat([b["observation"][..., 0] for b in batches], dim=-1)
    assert obs.tolist() == [[_reference_observations(6)] * 2] * 2
    assert all(b["collector", "worker_id"][:, 0, 0].tolist() == [0, 1] for b in batches)
    check_traj_ids(_streams(batches, time_dim=-1))
    batches[0]["observation"].add_(100)  # the caller's memory: the next batch is unaffected
    assert next(iter(collector))["observation"].max() < 100


def test_sync_batches_run_the_newest_weights_with_their_version(sync_pair):
    collector, policy = sync_pair
    it = iter(collector)
    for value in (3.0, 4.0, 5.0):
        set_policy_version(policy, value)
        collector.update_policy_weights_()
        batch = next(it)
        assert batch["action"].unique().tolist() == [value]
        assert batch["collector", "policy_version"].unique().tolist() == [collector.policy_version]
    collector.update_policy_weights_({1: {"module.version": torch.full((1,), 9.0)}})
    batch = next(it)
    assert batch["action"][0].unique().tolist() == [5.0]
    assert batch["action"][1].unique().tolist() == [9.0]
    with pytest.raises(KeyError, match="available keys"):
        collector.update_policy_weights_({"module.nope": torch.zeros(1)})
    with pytest.raises(ValueError, match="wrong shape"):
        collector.update_policy_weights_({"module.version": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"out of range"):
        collector.update_policy_weights_(worker_ids=[2])


def test_seeds_states_and_reset(sync_pair):
    collector, policy = sync_pair
    expected = _env().set_seed(_env().set_seed(11))
    assert collector.set_seed(11) == expected
    set_policy_version(policy, 2.0)
    collector.update_policy_weights_()
    saved_version = collector.policy_version
    next(iter(collector))
    state = collector.state_dict()
    assert len(state["workers"]) == 2 and state["frames"] == collector.frames
    assert [s["collector"]["frames"] for s in state["workers"]] == [collector.frames // 2] * 2
    set_policy_version(policy, 7.0)
    collector.update_policy_weights_()
    collector.load_state_dict(state)  # the actors run the state's weights until an update
    batch = next(iter(collector))
    assert batch["action"].unique().tolist() == [2.0]
    assert batch["collector", "policy_version"].unique().tolist() == [saved_version]
    with pytest.raises(ValueError, match="holds 1 collectors"):
        collector.load_state_dict({"frames": 0, "workers": state["workers"][:1]})
    collector.reset()
    assert next(iter(collector))["observation"][..., 0, 0].tolist() == [[0.0, 0.0]] * 2
    with pytest.raises(TypeError, match="without an end"):
        len(collector)


def test_set_seed_seeds_each_actors_torch_generator(ray_session):
    # policy None: random actions from the action spec, drawn with the actor's global torch
    # generator, which every fresh actor process starts with the same default seed
    collector = RayCollector(_env, None, num_collectors=2, frames_per_batch=8, sync=True)
    with collector:
        collector.set_seed(5)
        collector.reset()
        first = next(iter(collector))["action"]  # [actors, envs, T, 1]
        assert not torch.equal(first[0], first[1])  # each actor draws noise of its own
        collector.set_seed(5)  # the same seeds draw the same noise again
        collector.reset()
        assert torch.equal(next(iter(collector))["action"], first)


def test_async_batches_are_one_actor_each_and_at_most_one_stale(ray_session):
    policy = version_policy()
    collector = RayCollector(
        [lambda: CountingEnv(max_steps=MAX_STEPS)] * 2, policy, frames_per_batch=3, total_frames=30
    )
    with collector:
        assert len(collector) == 10
        # the version each actor's next batch must have at least: the one before the update
        # that follows its last batch (that update may miss the batch already in flight)
        floor, batches = {0: 0, 1: 0}, []
        for i, batch in enumerate(collector):
            assert batch.batch_size == (3,)
            w = collector.last_worker
            assert batch["collector", "worker_id"].unique().tolist() == [w]
            version = batch["collector", "policy_version"].unique().tolist()
            assert len(version) == 1 and batch["action"].unique().tolist() == [float(version[0])]
            assert version[0] >= floor[w]  # at most one update behind: one stale batch
            batches.append(batch.unsqueeze(0))
            floor[w] = collector.policy_version
            set_policy_version(policy, float(i + 1))
            collector.update_policy_weights_()
        assert collector.frames == 30 and len(batches) == 10
    check_traj_ids(_streams(batches, time_dim=-1))


def test_max_weight_update_interval_publishes_to_actors_that_ran_too_many_batches(sync_pair):
    _, _ = sync_pair  # the module's Ray set-up
    policy = version_policy()
    collector = RayCollector(
        _env, policy, num_collectors=2, frames_per_batch=8, sync=True, max_weight_update_interval=1
    )
    with collector:
        actions = []
        for i, batch in zip(range(6), collector):
            actions.append(batch["action"].unique().tolist())
            set_policy_version(policy, float(i + 1))  # an optimizer step, never published by hand
    # at most k + 1 = 2 batches per published version: the construction weights (0) for the
    # first two, then the weights of the moment before batches 3 and 5
    assert actions == [[0.0], [0.0], [2.0], [2.0], [4.0], [4.0]]


def test_max_weight_update_interval_bounds_each_async_actors_run_of_one_version(ray_session):
    policy = version_policy()
    collector = RayCollector(
        [lambda: CountingEnv(max_steps=MAX_STEPS)] * 2,
        policy,
        frames_per_batch=3,
        total_frames=36,
        max_weight_update_interval=0,
    )
    with collector:
        versions: dict[int, list[int]] = {0: [], 1: []}
        for i, batch in enumerate(collector):
            versions[collector.last_worker].append(
                int(batch["collector", "policy_version"].unique().item())
            )
            set_policy_version(policy, float(i + 1))
    for runs in versions.values():  # interval 0: every batch of an actor brings new weights
        assert len(runs) >= 2 and all(b > a for a, b in itertools.pairwise(runs)), versions


@pytest.mark.parametrize("interval", [-2, 1.5, True])
def test_max_weight_update_interval_is_checked(interval):
    with pytest.raises(ValueError, match="max_weight_update_interval must be an int >= -1"):
        RayCollector(_env, frames_per_batch=4, max_weight_update_interval=interval)


def test_actors_can_run_a_multisync_collector_and_fill_a_local_buffer(ray_session):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=SamplerWithoutReplacement())
    with RayCollector(
        _env,
        collector_class=MultiSyncCollector,
        num_workers_per_collector=2,
        collector_kwargs={"mp_start_method": "fork"},
        frames_per_batch=8,
        total_frames=16,
        replay_buffer=rb,
    ) as collector:
        assert list(collector) == [None, None]  # the batches went to the buffer
    data = rb.sample(16)
    data = data[data["index"].argsort()].reshape(2, 2, 2, 2)  # [batch, inner worker, env, T]
    assert data["collector", "worker_id"].unique().tolist() == [0]  # the actor's index
    ids = data["collector", "traj_ids"]
    assert set(ids[:, 0].unique().tolist()).isdisjoint(ids[:, 1].unique().tolist())


def test_an_env_exception_names_the_actor_and_keeps_the_actors(ray_session):
    collector = RayCollector(
        [_env, lambda: FailingEnv(batch_size=(2,), fail_after=3)],
        frames_per_batch=8,
        sync=True,
    )
    with pytest.raises(WorkerError, match="actor 1 raised RuntimeError") as info:
        for _ in collector:
            pass
    assert "failing on purpose" in str(info.value) and "Traceback" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert collector.restarts == [0, 0]  # an exception is not a restart
    assert collector.set_seed(1) == FailingEnv(batch_size=(2,)).set_seed(_env().set_seed(1))
    handles = collector.remote_collectors
    collector.shutdown()
    collector.shutdown()
    for handle in handles:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(handle.reset.remote(), timeout=30)
    with pytest.raises(RuntimeError, match="shut down"):
        next(iter(collector))


def test_a_factory_that_raises_fails_the_start(ray_session):
    def broken():
        raise ValueError("no env today")

    with pytest.raises(WorkerError, match=r"actor 0 raised ValueError: no env today.*closed"):
        RayCollector(broken, frames_per_batch=2)


# TorchRL 0.14.1's RayCollector parameters and defaults (inspect.signature), tdrl's extra ones
_TORCHRL = {
    "policy": None,
    "policy_factory": None,
    "trust_policy": None,
    "total_frames": -1,
    "device": None,
    "storing_device": None,
    "env_device": None,
    "policy_device": None,
    "max_frames_per_traj": -1,
    "init_random_frames": -1,
    "reset_at_each_iter": False,
    "postproc": None,
    "split_trajs": False,
    "collector_kwargs": None,
    "num_workers_per_collector": 1,
    "sync": False,
    "ray_init_config": None,
    "remote_configs": None,
    "num_collectors": None,
    "update_after_each_batch": False,
    "max_weight_update_interval": -1,
    "replay_buffer": None,
    "weight_updater": None,
    "weight_sync_schemes": None,
    "weight_recv_schemes": None,
    "use_env_creator": False,
    "no_cuda_sync": None,
    "trajs_per_batch": None,
    "pre_collect_hook": None,
    "post_collect_hook": None,
}


def test_torchrl_arguments_are_accepted_or_refused_by_name():
    params = inspect.signature(RayCollector).parameters
    for name, default in _TORCHRL.items():
        assert params[name].default == default, name
    assert params["frames_per_batch"].default is inspect.Parameter.empty
    refused = {
        "weight_updater": object(),
        "weight_sync_schemes": {"policy": object()},
        "trajs_per_batch": 4,
        "trust_policy": False,
    }
    for name, value in refused.items():
        with pytest.raises(ValueError, match=rf"{name}=.* is not supported"):
            RayCollector(_env, frames_per_batch=4, **{name: value})
    with pytest.raises(ValueError, match="MultiAsyncCollector is not supported"):
        RayCollector(_env, frames_per_batch=4, collector_class="async")
    with pytest.raises(ValueError, match="needs a multi-process collector"):
        RayCollector(_env, frames_per_batch=4, num_workers_per_collector=2)
    with pytest.raises(ValueError, match="multiple of the number of collectors"):
        RayCollector(_env, num_collectors=3, frames_per_batch=4, sync=True)
    with pytest.raises(ValueError, match="may not set 'max_restarts'"):
        RayCollector(_env, frames_per_batch=4, remote_configs={"max_restarts": 2})
    with pytest.raises(ValueError, match="may not set \\['total_frames'\\]"):
        RayCollector(_env, frames_per_batch=4, collector_kwargs={"total_frames": 3})
    with pytest.raises(TypeError, match="Env instances cannot travel"):
        RayCollector(_env(), frames_per_batch=4)
    with pytest.raises(ValueError, match="max_restarts must be an int >= 0"):
        RayCollector(_env, frames_per_batch=4, max_restarts=-1)
