"""compile_policy: compiled stochastic policies pick the eager actions, in every collector."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from tdrl.envs import PendulumV1Env
from tdrl.errors import WorkerError
from tdrl.modules import MLP, NormalParamExtractor, ProbabilisticActor, TanhNormal


def make_env() -> PendulumV1Env:
    return PendulumV1Env(batch_size=[2])


def make_policy() -> ProbabilisticActor:
    torch.manual_seed(0)
    net = nn.Sequential(MLP(3, 2, num_cells=[16]), NormalParamExtractor())
    module = TensorDictModule(net, ["observation"], ["loc", "scale"])
    return ProbabilisticActor(module, ["loc", "scale"], distribution_class=TanhNormal)


def collect_actions(cls, compile_policy):
    if cls is Collector:  # it starts from its constructor's reset (as TorchRL's): seed first
        env = make_env()
        env.set_seed(7)
        args: tuple = (env,)
    else:
        args = ([make_env],)  # one worker process
    collector = cls(
        *args, make_policy(), frames_per_batch=8, total_frames=24, compile_policy=compile_policy
    )
    if cls is not Collector:
        collector.set_seed(7)  # the multi-process collectors reset after seeding (TorchRL)
    torch.manual_seed(3)
    try:
        return [batch["action"].clone() for batch in collector]
    finally:
        collector.shutdown()


# Inductor compiles C++: the first compilation on a machine (cold cache) takes tens of seconds.
@pytest.mark.timeout(300)
def test_inductor_compiled_stochastic_policy_picks_the_eager_actions():
    expected = collect_actions(Collector, None)
    got = collect_actions(Collector, {"warmup": 2})
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.timeout(120)
def test_multi_sync_workers_compile_the_policy_and_pick_the_eager_actions():
    expected = collect_actions(MultiSyncCollector, None)
    got = collect_actions(MultiSyncCollector, {"backend": "eager", "warmup": 2})
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.timeout(120)
def test_multi_async_workers_collect_with_a_compiled_policy():
    batches = collect_actions(MultiAsyncCollector, {"backend": "eager", "warmup": 2})
    assert len(batches) == 3
    for actions in batches:  # [envs, steps, action]; Pendulum's torque bound is 2
        assert actions.shape == (2, 4, 1) and bool(actions.abs().le(2.0).all())


@pytest.mark.timeout(120)
def test_a_bad_compile_argument_names_the_worker_and_the_argument():
    with pytest.raises(WorkerError, match=r"unknown torch.compile argument\(s\) \['fulgraph'\]"):
        collect_actions(MultiSyncCollector, {"backend": "eager", "fulgraph": True})


def test_a_bad_compile_argument_is_refused_before_collecting():
    with pytest.raises(TypeError, match=r"Collector.__init__: compile_policy: unknown torch"):
        Collector(make_env(), make_policy(), frames_per_batch=8, compile_policy={"mode_": 1})
