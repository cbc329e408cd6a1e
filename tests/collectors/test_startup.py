"""What the Collector does before its first batch, as TorchRL's: the reset and policy call at
construction (RNG draws, lazy layers, exploration type), frame-count warnings and rounding,
init_random_frames in whole batches, set_seed and total_frames=None."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, interaction_type
from torch import nn

from tdrl.collectors import Collector, RandomPolicy
from tdrl.collectors._startup import calls_policy_at_start, materialize_lazy
from tdrl.data import LazyTensorStorage, ReplayBuffer
from tdrl.envs import ExplorationType
from tdrl.modules import Actor
from tdrl.specs import Composite, Unbounded
from tdrl.testing import CountingEnv

pytestmark = pytest.mark.timeout(60)


class _ResetCounter(CountingEnv):
    resets = 0

    def _reset(self, tensordict):
        self.resets += 1
        return super()._reset(tensordict)


def _const(value: float = 0.5):
    def policy(td):
        return td.set("action", torch.full((*td.batch_size, 1), value))

    return policy


def test_the_constructor_resets_and_the_first_batch_starts_there():
    env = _ResetCounter(batch_size=(2,), max_steps=100)
    collector = Collector(env, _const(), frames_per_batch=6)
    assert env.resets == 1  # TorchRL resets in its constructor
    batch = collector.rollout()
    assert env.resets == 1
    assert batch["observation"][0, :, 0].tolist() == [0, 1, 2]
    assert batch["collector", "traj_ids"].tolist() == [[0] * 3, [1] * 3]


def test_reset_at_each_iter_resets_again_with_fresh_ids():
    env = _ResetCounter(batch_size=(2,), max_steps=100)
    collector = Collector(env, _const(), frames_per_batch=4, reset_at_each_iter=True)
    batch = collector.rollout()
    assert env.resets == 2
    # TorchRL: ids 0, 1 go to the constructor's trajectories, the first batch's get 2, 3
    assert batch["collector", "traj_ids"].tolist() == [[2, 2], [3, 3]]


def test_the_policy_runs_once_at_construction_without_an_exploration_type():
    seen = []

    def policy(td):
        seen.append((interaction_type(), td.get("observation").clone()))
        return _const()(td)

    Collector(CountingEnv(), policy, frames_per_batch=2, exploration_type="deterministic")
    # TorchRL calls the policy on the reset data outside any exploration-type block
    assert len(seen) == 1 and seen[0][0] is None
    assert seen[0][1].tolist() == [0.0]


def test_lazy_layers_exist_after_construction():
    policy = TensorDictModule(nn.LazyLinear(1), ["observation"], ["action"])
    Collector(CountingEnv(), policy, frames_per_batch=2)
    assert policy.module.weight.shape == (1, 1)
    assert not isinstance(policy.module.weight, nn.parameter.UninitializedParameter)


def test_construction_draws_from_torchs_generator_as_torchrl():
    # TorchRL draws one action from the action spec (its RandomPolicy runs) at construction
    torch.manual_seed(0)
    Collector(CountingEnv(), frames_per_batch=2)
    after = torch.rand(1)
    torch.manual_seed(0)
    CountingEnv().full_action_spec.rand()
    assert torch.equal(after, torch.rand(1))


def test_no_construction_call_with_a_replay_buffer_and_out_keys():
    calls = []
    module = TensorDictModule(nn.Linear(1, 1), ["observation"], ["action"])
    module.register_forward_hook(lambda *args: calls.append(1))
    buffer = ReplayBuffer(storage=LazyTensorStorage(10))
    Collector(CountingEnv(), module, frames_per_batch=2, replay_buffer=buffer)
    assert calls == []
    Collector(CountingEnv(), module, frames_per_batch=2)
    assert calls == [1]


def test_calls_policy_at_start_follows_torchrls_rule():
    env = CountingEnv()
    linear = TensorDictModule(nn.Linear(1, 1), ["observation"], ["action"])
    assert calls_policy_at_start(linear, env, has_buffer=False)
    assert not calls_policy_at_start(linear, env, has_buffer=True)
    assert calls_policy_at_start(_const(), env, has_buffer=True)  # no out_keys

    # a complete spec naming an entry the env lacks and covering every out key: no call
    class Declared:
        out_keys = ["action", "extra"]
        spec = Composite(action=Unbounded(shape=(1,)), extra=Unbounded(shape=(1,)))

    assert not calls_policy_at_start(Declared(), env, has_buffer=False)
    Declared.out_keys = ["action", "extra", "other"]  # an out key the spec does not cover
    assert calls_policy_at_start(Declared(), env, has_buffer=False)
    actor = Actor(nn.Linear(1, 1), in_keys=["observation"], out_keys=["action"])
    assert calls_policy_at_start(actor, env, has_buffer=False)  # its spec is the env's


def test_materialize_lazy_runs_a_lazy_policy_on_the_envs_zeros():
    policy = TensorDictModule(nn.LazyLinear(2), ["observation"], ["action"])
    materialize_lazy(policy, CountingEnv)
    assert policy.module.weight.shape == (2, 1)
    materialize_lazy(policy, lambda: pytest.fail("no env is built for a materialised policy"))


def test_random_frames_count_whole_batches():
    env = CountingEnv(max_steps=100)
    with pytest.warns(UserWarning, match=r"init_random_frames \(6\) is not a multiple"):
        collector = Collector(
            env, _const(0.5), frames_per_batch=4, total_frames=12, init_random_frames=6
        )
    policy_steps = [int(b["action"].eq(0.5).sum()) for b in collector]
    # frames 0 and 4 are below 6: both batches are random; TorchRL never mixes in a batch
    assert policy_steps == [0, 0, 4]


def test_random_frames_read_the_replay_buffers_write_count():
    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    buffer.extend(TensorDict(x=torch.zeros(8), batch_size=[8]))
    collector = Collector(
        CountingEnv(max_steps=100),
        _const(0.5),
        frames_per_batch=4,
        total_frames=4,
        init_random_frames=6,
        replay_buffer=buffer,
    )
    assert collector._use_random_frames() is False  # 8 frames were written already
    buffer.empty()
    assert collector._use_random_frames() is True


@pytest.mark.parametrize(
    ("fpb", "total", "warns"), [(4, 10, True), (4, 12, False), (4, -1, False), (4, None, False)]
)
def test_total_frames_not_a_multiple_warns(fpb, total, warns, recwarn):
    Collector(CountingEnv(), frames_per_batch=fpb, total_frames=total)
    messages = [str(w.message) for w in recwarn.list]
    assert any("2 more frames are collected" in m for m in messages) is warns


def test_total_frames_none_never_stops():
    collector = Collector(CountingEnv(), frames_per_batch=2, total_frames=None)
    assert collector.total_frames == -1
    it = iter(collector)
    assert [next(it).batch_size for _ in range(3)] == [torch.Size([2])] * 3
    with pytest.raises(TypeError, match="no length"):
        len(collector)


def test_set_seed_leaves_torchs_generator_alone():
    env = CountingEnv()
    collector = Collector(env, RandomPolicy(), frames_per_batch=2)
    state = torch.get_rng_state()
    assert collector.set_seed(3) == env.set_seed(3)
    assert env.seed == 3
    assert torch.equal(torch.get_rng_state(), state)


def test_exploration_type_none_is_random():
    collector = Collector(CountingEnv(), frames_per_batch=2, exploration_type=None)
    assert collector.exploration_type is ExplorationType.RANDOM
