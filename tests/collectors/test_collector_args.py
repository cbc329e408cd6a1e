"""TorchRL's collector arguments: len, devices, compile_policy, policy_factory, env kwargs,
set_truncated, hooks, and the arguments tdrl refuses beyond their defaults."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector
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


@pytest.mark.parametrize(("fpb", "total", "expected"), [(4, 10, 3), (4, 8, 2), (4, 1, 1)])
def test_len_is_the_number_of_batches(fpb, total, expected):
    collector = Collector(CountingEnv(), frames_per_batch=fpb, total_frames=total)
    assert len(collector) == expected  # ceil(total / fpb), as TorchRL
    assert len(list(collector)) == expected


def test_len_of_an_endless_collector_is_an_error():
    with pytest.raises(TypeError, match="total_frames=-1"):
        len(Collector(CountingEnv(), frames_per_batch=4))


def test_device_sets_the_policy_and_storing_devices():
    collector = Collector(CountingEnv(), _policy(), frames_per_batch=4, device="cpu")
    assert collector.policy_device == torch.device("cpu")
    assert collector.storing_device == torch.device("cpu")
    batch = collector.rollout()
    assert batch.device == torch.device("cpu")
    other = Collector(
        CountingEnv(), _policy(), frames_per_batch=4, device="cpu", storing_device="meta"
    )
    assert other.storing_device == torch.device("meta")  # explicit devices win


def test_env_device_other_than_the_envs_is_an_error():
    with pytest.raises(ValueError, match="env_device=meta"):
        Collector(CountingEnv(device="cpu"), frames_per_batch=4, env_device="meta")
    with pytest.raises(TypeError, match="one device"):
        Collector(CountingEnv(), frames_per_batch=4, device=["cpu", "cpu"])


def test_a_policy_already_on_policy_device_is_shared_not_copied():
    policy = _policy(0.25)
    collector = Collector(CountingEnv(), policy, frames_per_batch=2, policy_device="cpu")
    assert collector.policy is policy
    policy.module.value.data.fill_(0.75)  # in-process: the collector sees the new weights
    collector.update_policy_weights_()
    assert collector.rollout()["action"].unique().tolist() == [0.75]


def _counting_backend(calls: list[int]):
    def backend(gm, example_inputs):
        calls.append(1)
        return gm.forward

    return backend


def test_compile_policy_runs_the_compiled_policy_after_the_warmup_calls():
    calls: list[int] = []
    collector = Collector(
        CountingEnv(max_steps=100),
        _policy(0.5),
        frames_per_batch=4,
        compile_policy={"backend": _counting_backend(calls)},
    )
    batch = collector.rollout()
    assert calls  # the policy call went through torch.compile
    assert batch["action"].unique().tolist() == [0.5]  # and computed the same actions
    eager: list[int] = []
    Collector(
        CountingEnv(),
        _policy(),
        frames_per_batch=4,
        compile_policy={"backend": _counting_backend(eager), "warmup": 10},
    ).rollout()
    assert not eager  # the first `warmup` calls run eagerly


def test_compile_policy_checks_its_argument():
    with pytest.raises(TypeError, match="compile_policy must be a bool or a dict"):
        Collector(CountingEnv(), _policy(), frames_per_batch=2, compile_policy="yes")
    with pytest.raises(ValueError, match="compile_policy needs a policy"):
        Collector(CountingEnv(), frames_per_batch=2, compile_policy=True)


def test_policy_factory_builds_the_policy():
    collector = Collector(CountingEnv(), policy_factory=lambda: _policy(0.125), frames_per_batch=2)
    assert collector.rollout()["action"].unique().tolist() == [0.125]
    with pytest.raises(ValueError, match="policy and policy_factory exclude each other"):
        Collector(CountingEnv(), _policy(), policy_factory=_policy, frames_per_batch=2)


def test_create_env_kwargs_are_passed_to_the_factory():
    collector = Collector(
        CountingEnv, create_env_kwargs={"batch_size": (3,), "max_steps": 2}, frames_per_batch=6
    )
    batch = collector.rollout()
    assert batch.batch_size == (3, 2)
    assert batch["observation"][0, :, 0].tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="create_env_kwargs need an env factory"):
        Collector(CountingEnv(), create_env_kwargs={"max_steps": 2}, frames_per_batch=2)


def test_set_truncated_marks_the_last_step_of_each_batch():
    collector = Collector(
        CountingEnv(batch_size=(2,), max_steps=100),
        frames_per_batch=8,
        total_frames=16,
        set_truncated=True,
    )
    for batch in collector:
        assert batch["next", "truncated"][..., 0].tolist() == [[False] * 3 + [True]] * 2
        assert batch["next", "done"][..., 0].tolist() == [[False] * 3 + [True]] * 2
        assert not batch["next", "terminated"].any()


def test_set_truncated_needs_a_truncated_entry():
    env = CountingEnv()
    spec = env.full_done_spec.clone()
    del spec["truncated"]
    env.full_done_spec = spec
    with pytest.raises(ValueError, match="set_truncated=True needs a truncated entry"):
        Collector(env, frames_per_batch=2, set_truncated=True)


def test_hooks_run_around_each_batch():
    events: list = []
    collector = Collector(
        CountingEnv(max_steps=100),
        frames_per_batch=2,
        total_frames=4,
        pre_collect_hook=lambda: events.append("pre"),
        post_collect_hook=lambda td: events.append(td["observation"][:, 0].tolist()),
    )
    batches = list(collector)
    assert events == ["pre", [0.0, 1.0], "pre", [2.0, 3.0]]
    assert len(batches) == 2


def test_static_seed_returns_the_seed():
    assert Collector(CountingEnv(), frames_per_batch=2).set_seed(5, static_seed=True) == 5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("backend", "multiprocessing"),
        ("num_collectors", 2),
        ("sync", True),
        ("track_traj_ids", False),
        ("reset_when_done", False),
        ("use_buffers", False),
        ("extend_buffer", False),
        ("trust_policy", False),
        ("cudagraph_policy", True),
        ("weight_updater", object()),
        ("track_policy_version", True),
        ("compact_obs", True),
    ],
)
def test_arguments_tdrl_cannot_honour_raise(name, value):
    with pytest.raises(ValueError, match=f"{name}=.* is not supported by tdrl"):
        Collector(CountingEnv(), frames_per_batch=2, **{name: value})


def test_defaults_and_no_op_values_of_those_arguments_are_accepted():
    collector = Collector(
        CountingEnv(),
        frames_per_batch=2,
        total_frames=2,
        use_buffers=True,
        trust_policy=True,
        cudagraph_policy=False,
        no_cuda_sync=True,
        auto_register_policy_transforms=False,
    )
    assert [b.batch_size for b in collector] == [torch.Size([2])]


def test_weight_sync_schemes_belong_to_the_multi_process_collectors():
    with pytest.raises(ValueError, match="weight_sync_schemes is for the multi-process"):
        Collector(CountingEnv(), frames_per_batch=2, weight_sync_schemes={"policy": None})
