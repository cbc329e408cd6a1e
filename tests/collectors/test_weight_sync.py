"""Weight sync schemes: the parent/worker protocol in-process, and the collector contract."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import (
    Collector,
    MultiAsyncCollector,
    MultiProcessWeightSyncScheme,
    MultiSyncCollector,
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
)
from tdrl.testing import CountingEnv, set_policy_version, version_policy

CTX = multiprocessing.get_context("fork")


@pytest.mark.parametrize("scheme_cls", [SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme])
def test_receivers_apply_only_sent_weights(scheme_cls):
    parent, workers = version_policy(), [version_policy(), version_policy()]
    scheme = scheme_cls()
    receivers = scheme.setup(parent, 2, CTX)
    for receiver, policy in zip(receivers, workers):
        receiver.attach(policy)
    scheme.send(TensorDict({"module": {"version": torch.full((1,), 3.0)}}))
    receivers[0].receive(scheme.message(0))
    assert workers[0].module.version.item() == 3.0 and workers[1].module.version.item() == 0.0
    set_policy_version(workers[0], 9.0)  # nothing new was sent: the worker's weights stay
    receivers[0].receive(scheme.message(0))
    assert workers[0].module.version.item() == 9.0
    receivers[1].receive(scheme.message(1))
    assert workers[1].module.version.item() == 3.0
    with pytest.raises(RuntimeError, match="already used"):
        scheme.setup(parent, 2, CTX)
    scheme.close()


def test_shared_mem_needs_weights_and_no_sync_ignores_updates():
    with pytest.raises(ValueError, match="NoWeightSyncScheme"):
        SharedMemWeightSyncScheme().setup(lambda td: td, 1, CTX)
    scheme = NoWeightSyncScheme()
    (receiver,) = scheme.setup(version_policy(), 1, CTX)
    worker = version_policy()
    receiver.attach(worker)
    scheme.send(TensorDict({"module": {"version": torch.ones(1)}}))
    receiver.receive(scheme.message(0))
    assert worker.module.version.item() == 0.0


def test_default_schemes_and_weight_checks():
    with MultiSyncCollector(
        [CountingEnv], version_policy(), frames_per_batch=2, mp_start_method="fork"
    ) as collector:
        assert isinstance(collector.weight_sync, SharedMemWeightSyncScheme)
        with pytest.raises(KeyError, match="available keys"):
            collector.update_policy_weights_({"module.nope": torch.zeros(1)})
        with pytest.raises(ValueError, match="wrong shape"):
            collector.update_policy_weights_({"module.version": torch.zeros(2)})
        collector.update_policy_weights_({"module.version": torch.ones(1)})  # a state_dict
        assert next(iter(collector))["action"].unique().tolist() == [1.0]
    with MultiSyncCollector([CountingEnv], frames_per_batch=2, mp_start_method="fork") as c:
        assert isinstance(c.weight_sync, NoWeightSyncScheme)
        c.update_policy_weights_()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("scheme_cls", [SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme])
@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_batches_started_after_an_update_use_the_new_weights(cls, scheme_cls):
    policy = version_policy()
    collector = cls(
        [lambda: CountingEnv(batch_size=(2,), max_steps=4)] * 2,
        policy,
        frames_per_batch=8,
        total_frames=8 * 12,
        weight_sync_schemes={"policy": scheme_cls()},
        mp_start_method="fork",
    )
    version, started_at = 0, {}
    with collector:
        for i, batch in enumerate(collector):
            seen = batch["action"].unique().tolist()
            assert len(seen) == 1  # one batch, one version
            if cls is MultiSyncCollector:
                assert seen == [version]
            else:
                # the worker restarted as soon as its batch was yielded (the caller owns a
                # copy), before this iteration's update; shared memory is read when the worker
                # starts, which may be after later updates
                expected = started_at.get(collector.last_worker, 0)
                exact = scheme_cls is MultiProcessWeightSyncScheme
                assert seen == [expected] if exact else seen[0] >= expected
                started_at[collector.last_worker] = version
            version = i + 1
            set_policy_version(policy, version)
            collector.update_policy_weights_()


def test_single_process_collector_copies_weights_in_place():
    policy = version_policy()
    param = policy.module.version
    collector = Collector(CountingEnv(), policy, frames_per_batch=2)
    weights = TensorDict({"module": {"version": torch.full((1,), 2.0)}})
    collector.update_policy_weights_(weights)
    weights["module", "version"].fill_(5.0)  # the policy holds a copy, not the caller's tensor
    assert policy.module.version is param and isinstance(param, torch.nn.Parameter)
    assert param.item() == 2.0
    collector.update_policy_weights_({"module.version": torch.full((1,), 3.0)})
    assert collector.rollout()["action"].unique().tolist() == [3.0]
