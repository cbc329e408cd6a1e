"""TorchRL's arguments of the multi-process collectors and AsyncCollector."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import (
    AsyncCollector,
    MultiAsyncCollector,
    MultiProcessWeightSyncScheme,
    MultiSyncCollector,
)
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


class _Const(torch.nn.Module):
    """action = its ``value`` parameter: the batch tells which weights ran."""

    def __init__(self, value: float = 0.5):
        super().__init__()
        self.value = torch.nn.Parameter(torch.full((1,), value))

    def forward(self, obs):
        return self.value.expand(*obs.shape[:-1], 1).clone()


def _policy(value: float = 0.5):
    return TensorDictModule(_Const(value), in_keys=["observation"], out_keys=["action"])


def _set(policy, value: float) -> None:
    policy.module.value.data.fill_(value)


def test_one_factory_with_num_workers_and_per_worker_env_kwargs():
    with MultiSyncCollector(
        CountingEnv,
        num_workers=2,
        create_env_kwargs=[{"max_steps": 2}, {"max_steps": 3}],
        frames_per_batch=12,
        total_frames=24,
        mp_start_method="fork",
    ) as collector:
        assert len(collector) == 2
        batch = next(iter(collector))
    assert batch.batch_size == (2, 6)
    assert batch["observation"][0, :, 0].tolist() == [0, 1] * 3
    assert batch["observation"][1, :, 0].tolist() == [0, 1, 2] * 2
    with pytest.raises(TypeError, match="or one callable with num_workers"):
        MultiSyncCollector(CountingEnv, frames_per_batch=2, mp_start_method="fork")
    with pytest.raises(ValueError, match="num_workers does not match"):
        MultiSyncCollector([CountingEnv], num_workers=2, frames_per_batch=2)


def test_cat_results_concatenates_the_workers_along_a_dim():
    with MultiSyncCollector(
        [lambda: CountingEnv(max_steps=100)] * 2,
        frames_per_batch=8,
        cat_results=-1,
        mp_start_method="fork",
    ) as collector:
        batch = next(iter(collector))
    assert batch.batch_size == (8,)  # [worker 0's 4 steps, worker 1's 4 steps]
    assert batch["collector", "worker_id"].tolist() == [0] * 4 + [1] * 4
    assert batch["observation"][:, 0].tolist() == [0, 1, 2, 3] * 2
    with pytest.raises(ValueError, match="cat_results is for MultiSyncCollector"):
        MultiAsyncCollector([CountingEnv], frames_per_batch=2, cat_results=0)
    with pytest.raises(ValueError, match="cat_results must be 'stack' or an int"):
        MultiSyncCollector([CountingEnv], frames_per_batch=2, cat_results="cat")


def test_update_at_each_batch_publishes_the_current_weights():
    policy = _policy(0.5)
    with MultiSyncCollector(
        [CountingEnv] * 2,
        policy,
        frames_per_batch=4,
        update_at_each_batch=True,
        mp_start_method="fork",
    ) as collector:
        it = iter(collector)
        assert next(it)["action"].unique().tolist() == [0.5]
        _set(policy, 0.25)  # no update_policy_weights_() call
        assert next(it)["action"].unique().tolist() == [0.25]


def test_policy_factory_builds_the_policy_in_the_workers_and_syncs_weights():
    with MultiSyncCollector(
        [CountingEnv] * 2,
        policy_factory=lambda: _policy(0.125),
        frames_per_batch=4,
        weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        mp_start_method="fork",
    ) as collector:
        it = iter(collector)
        assert next(it)["action"].unique().tolist() == [0.125]
        weights = collector.policy.module.state_dict()
        weights["value"] = torch.full((1,), 0.75)
        collector.update_policy_weights_({f"module.{k}": v for k, v in weights.items()})
        assert next(it)["action"].unique().tolist() == [0.75]


def test_weight_sync_schemes_are_checked():
    with pytest.raises(ValueError, match="only syncs the policy"):
        MultiSyncCollector(
            [CountingEnv],
            frames_per_batch=2,
            weight_sync_schemes={"replay_buffer": MultiProcessWeightSyncScheme()},
        )
    with pytest.raises(TypeError, match="must be a WeightSyncScheme"):
        MultiSyncCollector([CountingEnv], frames_per_batch=2, weight_sync_schemes={"policy": 1})


@pytest.mark.parametrize(
    ("name", "value"), [("num_threads", 4), ("init_fn", print), ("preemptive_threshold", 0.5)]
)
def test_multi_arguments_tdrl_cannot_honour_raise(name, value):
    with pytest.raises(ValueError, match=f"{name}=.* is not supported by tdrl"):
        MultiSyncCollector([CountingEnv], frames_per_batch=2, **{name: value})


def test_async_collector_runs_one_worker_and_yields_owned_batches():
    policy = _policy(0.5)
    with AsyncCollector(
        lambda: CountingEnv(max_steps=100),
        policy,
        frames_per_batch=3,
        total_frames=9,
        mp_start_method="fork",
    ) as collector:
        assert collector.num_workers == 1 and len(collector) == 3
        batches = []
        for batch in collector:
            batches.append(batch)
            _set(policy, 0.25)
            collector.update_policy_weights_()
    assert [b["observation"][:, 0].tolist() for b in batches] == [
        [0.0, 1.0, 2.0],
        [3.0, 4.0, 5.0],
        [6.0, 7.0, 8.0],
    ]
    assert batches[0]["action"].unique().tolist() == [0.5]
    # the batch in flight during the update keeps the old weights; later ones have the new
    assert batches[-1]["action"].unique().tolist() == [0.25]
    with pytest.raises(TypeError, match="must be one env factory"):
        AsyncCollector([CountingEnv] * 2, frames_per_batch=2)


def test_static_seed_returns_the_seed_instead_of_chaining_it():
    with MultiSyncCollector(
        [CountingEnv] * 2, frames_per_batch=2, mp_start_method="fork"
    ) as collector:
        assert collector.set_seed(11, static_seed=True) == 11
        chained = CountingEnv().set_seed(CountingEnv().set_seed(11))
        assert collector.set_seed(11) == chained != 11
