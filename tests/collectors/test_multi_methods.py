"""TorchRL's collector methods on the multi-process collectors: update_policy_weights_ with
worker_ids, reset(reset_idx), iterator, shutdown arguments and load_state_dict."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.collectors import (
    AsyncCollector,
    BaseCollector,
    MultiAsyncCollector,
    MultiProcessWeightSyncScheme,
    MultiSyncCollector,
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
)
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)
CTX = multiprocessing.get_context("fork")


class _Const(torch.nn.Module):
    def __init__(self, value: float = 0.0):
        super().__init__()
        self.value = torch.nn.Parameter(torch.full((1,), value))

    def forward(self, obs):
        return self.value.expand(*obs.shape[:-1], 1).clone()


def _policy(value: float = 0.0):
    return TensorDictModule(_Const(value), in_keys=["observation"], out_keys=["action"])


def _weights(value: float):
    return TensorDict({"module": {"value": torch.full((1,), value)}})


def _env():
    return CountingEnv(max_steps=100)


def _per_worker_actions(batch):
    return [row.unique().tolist() for row in batch["action"]]


@pytest.mark.parametrize("scheme_cls", [SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme])
def test_schemes_send_to_the_selected_workers_only(scheme_cls):
    parent, workers = _policy(), [_policy(), _policy(), _policy()]
    scheme = scheme_cls()
    receivers = scheme.setup(parent, 3, CTX)
    for receiver, policy in zip(receivers, workers):
        receiver.attach(policy)
    scheme.send(_weights(1.0))  # everyone
    scheme.send(_weights(2.0), [1])  # worker 1 only, before anyone started a batch
    for w, receiver in enumerate(receivers):
        receiver.receive(scheme.message(w))
    assert [p.module.value.item() for p in workers] == [1.0, 2.0, 1.0]
    scheme.send(_weights(3.0), [0, 2])
    scheme.send(_weights(4.0))  # newer than the per-worker send: everyone gets 4
    for w, receiver in enumerate(receivers):
        receiver.receive(scheme.message(w))
    assert [p.module.value.item() for p in workers] == [4.0, 4.0, 4.0]
    scheme.close()


@pytest.mark.parametrize(
    "scheme_cls", [None, SharedMemWeightSyncScheme, MultiProcessWeightSyncScheme]
)
def test_update_policy_weights_with_worker_ids(scheme_cls):
    schemes = None if scheme_cls is None else {"policy": scheme_cls()}
    with MultiSyncCollector(
        [_env] * 3,
        _policy(0.0),
        frames_per_batch=3,
        weight_sync_schemes=schemes,
        mp_start_method="fork",
    ) as collector:
        collector.update_policy_weights_(_policy(1.0), worker_ids=1)
        batches = collector.iterator()
        assert _per_worker_actions(next(batches)) == [[0.0], [1.0], [0.0]]
        collector.update_policy_weights_(weights=_weights(2.0), worker_ids=[0, 2])
        assert _per_worker_actions(next(batches)) == [[2.0], [1.0], [2.0]]
        collector.update_policy_weights_({1: _policy(3.0), 2: _weights(4.0)})
        assert _per_worker_actions(next(batches)) == [[2.0], [3.0], [4.0]]
        collector.update_policy_weights_(policy=_policy(5.0))
        assert _per_worker_actions(next(batches)) == [[5.0], [5.0], [5.0]]
        with pytest.raises(ValueError, match="out of range"):
            collector.update_policy_weights_(_policy(6.0), worker_ids=3)
        with pytest.raises(ValueError, match="worker_ids"):
            collector.update_policy_weights_({0: _policy(6.0)}, worker_ids=[0])


def test_async_update_with_worker_ids_reaches_the_next_batch_of_that_worker():
    with MultiAsyncCollector(
        [_env] * 2, _policy(0.0), frames_per_batch=2, total_frames=400, mp_start_method="fork"
    ) as collector:
        seen: dict[int, list[list[float]]] = {0: [], 1: []}
        batches = collector.iterator()
        while not (seen[0] and seen[1]):
            batch = next(batches)
            seen[collector.last_worker].append(batch["action"].unique().tolist())
        collector.update_policy_weights_(_policy(7.0), worker_ids=[1])
        after: dict[int, list[list[float]]] = {0: [], 1: []}
        for batch in batches:  # until worker 1 ran a batch started after the update
            after[collector.last_worker].append(batch["action"].unique().tolist())
            if after[1][-1:] == [[7.0]]:
                break
        assert after[1][-1:] == [[7.0]]
        # worker 1 yields at most its batch in flight with the old weights
        assert after[1][:-1] in ([], [[0.0]])
        assert all(a == [0.0] for a in seen[0] + seen[1] + after[0])


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_reset_restarts_the_selected_workers(cls):
    frames = 4 if cls is MultiSyncCollector else 2
    with cls([_env] * 2, frames_per_batch=frames, mp_start_method="fork") as collector:
        batches = collector.iterator()
        for _ in range(2 if cls is MultiSyncCollector else 4):
            next(batches)  # every worker is past observation 0
        collector.reset([True, False])
        starts = {}
        while len(starts) < 2:
            batch = next(batches)
            obs = batch["observation"][..., 0]
            if cls is MultiSyncCollector:
                starts = {0: obs[0, 0].item(), 1: obs[1, 0].item()}
            else:
                starts.setdefault(collector.last_worker, obs[0].item())
        assert starts[0] == 0.0 and starts[1] > 0.0
        collector.reset()
        batch = next(batches)
        assert batch["observation"][..., 0].flatten()[0].item() == 0.0
        with pytest.raises(ValueError, match="one bool per worker"):
            collector.reset([True])


def test_shutdown_arguments():
    collector = MultiSyncCollector([_env], frames_per_batch=1, mp_start_method="fork")
    with pytest.raises(ValueError, match="close_env=False"):
        collector.shutdown(close_env=False)
    with pytest.raises(ValueError, match="timeout"):
        collector.shutdown(-1.0)
    pids = collector.worker_pids
    collector.shutdown(0.0, True, False)  # no time for a clean exit: the worker is killed
    assert collector._pool._closed and collector.worker_pids == pids
    with pytest.raises(RuntimeError, match="shut down"):
        next(collector.iterator())


def test_shutdown_raise_on_error_false_swallows_a_failing_stop(monkeypatch):
    collector = AsyncCollector(_env, frames_per_batch=1, mp_start_method="fork")
    real = collector._pool.shutdown

    def failing(timeout=None):
        real(timeout)
        raise OSError("pipe broke")

    monkeypatch.setattr(collector._pool, "shutdown", failing)
    collector.shutdown(raise_on_error=False)
    assert collector._closed
    other = AsyncCollector(_env, frames_per_batch=1, mp_start_method="fork")
    real_other = other._pool.shutdown

    def failing_other(timeout=None):
        real_other(timeout)
        raise OSError("pipe broke")

    monkeypatch.setattr(other._pool, "shutdown", failing_other)
    with pytest.raises(OSError, match="pipe broke"):
        other.shutdown()


def test_load_state_dict_by_name_and_base_class():
    assert issubclass(MultiSyncCollector, BaseCollector)
    assert issubclass(AsyncCollector, BaseCollector)
    with MultiSyncCollector([_env] * 2, frames_per_batch=2, mp_start_method="fork") as a:
        next(a.iterator())
        state = a.state_dict()
    with MultiSyncCollector([_env] * 2, frames_per_batch=2, mp_start_method="fork") as b:
        b.load_state_dict(state_dict=state)
        assert b.frames == 2
        assert next(iter(b))["collector", "traj_ids"].tolist() == [[2], [3]]


def test_no_weight_sync_refuses_weights_for_a_weightless_policy():
    with MultiSyncCollector([_env], frames_per_batch=1, mp_start_method="fork") as collector:
        assert isinstance(collector.weight_sync, NoWeightSyncScheme)
        with pytest.raises(ValueError, match="no weights"):
            collector.update_policy_weights_(_policy(1.0), worker_ids=0)
