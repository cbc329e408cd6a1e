"""TorchRL's collector methods on the single-process Collector: reset, iterator, shutdown,
update_policy_weights_ forms, load_state_dict, BaseCollector and RandomPolicy."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

import tdrl.envs.core
from tdrl.collectors import BaseCollector, Collector, RandomPolicy
from tdrl.specs import Bounded
from tdrl.testing import CountingEnv


class _Const(torch.nn.Module):
    def __init__(self, value: float = 0.0):
        super().__init__()
        self.value = torch.nn.Parameter(torch.full((1,), value))

    def forward(self, obs):
        return self.value.expand(*obs.shape[:-1], 1).clone()


def _policy(value: float = 0.0):
    return TensorDictModule(_Const(value), in_keys=["observation"], out_keys=["action"])


def _obs(batch):
    return batch["observation"][..., 0].tolist()


def test_reset_restarts_every_env_with_fresh_trajectory_ids():
    env = CountingEnv(batch_size=(2,), max_steps=100)
    collector = Collector(env, frames_per_batch=4, total_frames=-1)
    first = next(iter(collector))
    assert _obs(first) == [[0.0, 1.0], [0.0, 1.0]]
    assert first["collector", "traj_ids"].tolist() == [[0, 0], [1, 1]]
    collector.reset()
    second = next(iter(collector))
    assert _obs(second) == [[0.0, 1.0], [0.0, 1.0]]  # counting starts over (not at 2)
    assert second["collector", "traj_ids"].tolist() == [[2, 2], [3, 3]]


def test_partial_reset_restarts_only_the_indexed_env():
    env = CountingEnv(batch_size=(2,), max_steps=100)
    collector = Collector(env, frames_per_batch=4, max_frames_per_traj=3)
    next(iter(collector))
    collector.reset(index=0)
    batch = next(iter(collector))
    assert _obs(batch) == [[0.0, 1.0], [2.0, 0.0]]  # env 1 continues and hits the 3-step cap
    assert batch["collector", "traj_ids"].tolist() == [[2, 2], [1, 3]]


def test_reset_refuses_what_tdrl_cannot_do():
    collector = Collector(CountingEnv(), frames_per_batch=2)
    with pytest.raises(ValueError, match=r"batch size \(\)"):
        collector.reset(index=0)
    with pytest.raises(ValueError, match="foo"):
        collector.reset(foo=1)
    collector.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.reset()


def test_iterator_yields_the_batches_until_total_frames():
    collector = Collector(CountingEnv(max_steps=100), frames_per_batch=3, total_frames=6)
    assert [_obs(b) for b in collector.iterator()] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_shutdown_arguments():
    closed = []

    class Env(CountingEnv):
        def close(self):
            closed.append(True)
            raise OSError("close failed")

    collector = Collector(Env, frames_per_batch=1)
    with pytest.raises(ValueError, match="timeout"):
        collector.shutdown(timeout=-1)
    collector.shutdown(close_env=False)  # the env the collector built stays open
    assert closed == []
    collector = Collector(Env, frames_per_batch=1)
    with pytest.raises(OSError, match="close failed"):
        collector.shutdown(1.0, True)
    collector = Collector(Env, frames_per_batch=1)
    collector.shutdown(raise_on_error=False)
    assert closed == [True, True]
    passed_in = Env()
    Collector(passed_in, frames_per_batch=1).shutdown()  # an env passed in stays the caller's
    assert closed == [True, True]


def test_update_policy_weights_takes_a_module_by_position_or_keyword():
    policy = _policy(0.0)
    collector = Collector(CountingEnv(), policy, frames_per_batch=2)
    collector.update_policy_weights_(_policy(2.0))
    assert policy.module.value.item() == 2.0
    collector.update_policy_weights_(policy=_policy(3.0))
    assert policy.module.value.item() == 3.0
    collector.update_policy_weights_(weights=TensorDict.from_module(_policy(4.0)))
    assert policy.module.value.item() == 4.0
    collector.update_policy_weights_(weights_dict={"policy": _policy(5.0)}, worker_ids=0)
    collector.update_policy_weights_(_policy(5.0), worker_ids=[0], model_id="policy")
    assert collector.rollout()["action"].unique().tolist() == [5.0]


def test_update_policy_weights_refuses_what_tdrl_cannot_do():
    collector = Collector(CountingEnv(), _policy(), frames_per_batch=2)
    update = collector.update_policy_weights_
    with pytest.raises(ValueError, match="out of range"):
        update(_policy(1.0), worker_ids=1)
    with pytest.raises(TypeError, match="worker indices"):
        update(_policy(1.0), worker_ids=torch.device("cpu"))
    with pytest.raises(ValueError, match="model_id='critic'"):
        update(_policy(1.0), model_id="critic")
    with pytest.raises(ValueError, match="weights_dict"):
        update(weights_dict={"policy": _policy(1.0), "critic": _policy(1.0)})
    with pytest.raises(ValueError, match="policy_or_weights, policy"):
        update(_policy(1.0), policy=_policy(1.0))
    with pytest.raises(ValueError, match="no parameters"):
        update(torch.nn.ReLU())
    with pytest.raises(ValueError, match="policy_weights is the deprecated name"):
        update(_policy(1.0), policy_weights=_policy(2.0))
    assert collector.policy.module.value.item() == 0.0


def test_update_policy_weights_takes_torchrl_s_deprecated_policy_weights():
    policy = _policy(0.0)
    collector = Collector(CountingEnv(), policy, frames_per_batch=2)
    with pytest.warns(DeprecationWarning, match="policy_weights is deprecated"):
        collector.update_policy_weights_(policy_weights=TensorDict.from_module(_policy(6.0)))
    assert policy.module.value.item() == 6.0


def test_load_state_dict_takes_state_dict_by_name():
    collector = Collector(CountingEnv(max_steps=100), frames_per_batch=2)
    next(iter(collector))
    state = collector.state_dict()
    other = Collector(CountingEnv(max_steps=100), frames_per_batch=2)
    other.load_state_dict(state_dict=state)
    assert other.frames == 2
    assert next(iter(other))["collector", "traj_ids"].tolist() == [1, 1]


def test_load_state_dict_strict_reaches_the_policy():
    # TorchRL forwards strict to the env's and the policy's load_state_dict
    collector = Collector(CountingEnv(max_steps=100), _policy(3.0), frames_per_batch=2)
    state = collector.state_dict()
    state["policy"] = {**state["policy"], "module.extra": torch.zeros(1)}
    other = Collector(CountingEnv(max_steps=100), _policy(0.0), frames_per_batch=2)
    with pytest.raises(RuntimeError, match=r"module\.extra"):
        other.load_state_dict(state)
    other.load_state_dict(state, strict=False)
    assert other.policy.module.value.item() == 3.0


def test_collectors_share_base_collector_and_its_abstract_methods():
    assert issubclass(Collector, BaseCollector)
    with pytest.raises(TypeError, match="abstract"):
        BaseCollector()  # type: ignore[abstract]
    pushed = []

    class Mine(BaseCollector):
        requested_frames_per_batch, total_frames = 1, 3
        _num_weight_workers = 2

        def iterator(self):
            for i in range(len(self)):
                if self.pre_collect_hook is not None:
                    self.pre_collect_hook()
                yield TensorDict(i=torch.tensor([i]), batch_size=[1])

        def shutdown(self, timeout=None, close_env=True, raise_on_error=True):
            pushed.append("shutdown")

        def set_seed(self, seed, static_seed=False):
            return seed

        def state_dict(self):
            return {}

        def load_state_dict(self, state_dict):
            pass

        def _push_weights(self, weights, worker_ids):
            pushed.append((weights, worker_ids))

    calls = []
    with Mine(pre_collect_hook=lambda: calls.append(1)) as mine:
        assert [b["i"].item() for b in mine] == [0, 1, 2] and calls == [1, 1, 1]
        mine.update_policy_weights_({0: {"w": 1}, 1: {"w": 2}})
        mine.update_policy_weights_(worker_ids=1)
    assert pushed == [({"w": 1}, [0]), ({"w": 2}, [1]), (None, [1]), "shutdown"]


def test_random_policy_is_tdrl_envs_and_takes_the_env_spec():
    assert RandomPolicy is tdrl.envs.core.RandomPolicy
    env = CountingEnv(batch_size=(2,))
    batch = Collector(env, RandomPolicy(), frames_per_batch=4).rollout()
    assert batch["action"].shape == (2, 2, 1)
    assert bool(env.action_spec.is_in(batch["action"]))
    spec = Bounded(0.25, 0.5, shape=(2, 1))
    actions = Collector(env, RandomPolicy(spec), frames_per_batch=4).rollout()["action"]
    assert bool(((actions >= 0.25) & (actions <= 0.5)).all())


def test_len_reads_frames_per_batch_when_a_subclass_sets_only_that():
    class Legacy(BaseCollector):
        frames_per_batch, total_frames = 4, 10

        def iterator(self):
            yield from ()

        def shutdown(self, timeout=None, close_env=True, raise_on_error=True):
            pass

        def set_seed(self, seed, static_seed=False):
            return seed

        def state_dict(self):
            return {}

        def load_state_dict(self, state_dict):
            pass

        def _push_weights(self, weights, worker_ids):
            pass

    assert len(Legacy()) == 3
