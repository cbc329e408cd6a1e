"""Single-process Collector: shapes, trajectory ids, truncation, resets, buffers and state."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector, split_trajectories
from tdrl.testing import CountingEnv, NestedCountingEnv


def test_batches_shape_and_total_frames():
    collector = Collector(
        CountingEnv(batch_size=(3,), max_steps=4), frames_per_batch=12, total_frames=30
    )
    shapes = [b.batch_size for b in collector]
    assert shapes == [torch.Size([3, 4])] * 3  # 12, 24, 36 >= 30
    assert collector.frames == 36


def test_frames_per_batch_is_rounded_up_to_the_env_batch_with_a_warning():
    with pytest.warns(UserWarning, match=r"frames_per_batch \(10\) is not a multiple"):
        collector = Collector(CountingEnv(batch_size=(3,)), frames_per_batch=10, total_frames=24)
    # as TorchRL: frames_per_batch counts the steps of each env, the batch has 12 frames
    assert (collector.frames_per_batch, collector.requested_frames_per_batch) == (4, 12)
    assert [b.batch_size for b in collector] == [torch.Size([3, 4])] * 2
    assert len(collector) == 2


@pytest.mark.parametrize("bad", [0, -3])
def test_frames_per_batch_must_be_positive(bad):
    with pytest.raises(ValueError, match="frames_per_batch must be positive"):
        Collector(CountingEnv(), frames_per_batch=bad)


def test_data_is_continuous_and_traj_ids_unique_across_batches():
    env = CountingEnv(batch_size=(2,), max_steps=3)
    collector = Collector(env, frames_per_batch=10, total_frames=20)
    batches = [b.clone() for b in collector]
    data = torch.cat(batches, dim=1)  # [2, 10]
    obs, nxt = data["observation"][..., 0], data["next", "observation"][..., 0]
    done = data["next", "done"][..., 0]
    ids = data["collector", "traj_ids"]
    assert obs[0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    for t in range(9):
        cont = ~done[:, t]
        assert torch.equal(nxt[:, t][cont], obs[:, t + 1][cont])
        assert torch.equal(ids[:, t][cont], ids[:, t + 1][cont])
        assert not (ids[:, t][~cont] == ids[:, t + 1][~cont]).any()
    assert set(ids[0].tolist()).isdisjoint(set(ids[1].tolist()))


def test_max_frames_per_traj_truncates():
    collector = Collector(
        CountingEnv(batch_size=(1,), max_steps=100),
        frames_per_batch=6,
        total_frames=6,
        max_frames_per_traj=2,
    )
    batch = next(iter(collector))
    assert batch["next", "truncated"][0, :, 0].tolist() == [False, True] * 3
    assert batch["next", "done"][0, :, 0].tolist() == [False, True] * 3
    assert batch["observation"][0, :, 0].tolist() == [0, 1] * 3
    assert len(set(batch["collector", "traj_ids"][0].tolist())) == 3


def test_max_frames_per_traj_counts_steps_as_torchrl_step_counter():
    collector = Collector(
        CountingEnv(batch_size=(2,), max_steps=100), frames_per_batch=8, max_frames_per_traj=3
    )
    batch = collector.rollout()
    for key in ("step_count", ("next", "step_count")):  # TorchRL's StepCounter entries
        assert batch[key].dtype == torch.int64
        assert batch[key].shape == (2, 4, 1)
    assert batch["step_count"][0, :, 0].tolist() == [0, 1, 2, 0]
    assert batch["next", "step_count"][0, :, 0].tolist() == [1, 2, 3, 1]
    assert batch["next", "truncated"][0, :, 0].tolist() == [False, False, True, False]
    assert not batch["next", "terminated"].any()


@pytest.mark.parametrize("limit", [None, 0, -1])
def test_max_frames_per_traj_of_zero_or_less_is_no_limit(limit):
    # TorchRL's DQN/PPO/A2C recipes pass max_frames_per_traj=-1
    env = CountingEnv(batch_size=(1,), max_steps=100)
    collector = Collector(env, frames_per_batch=5, max_frames_per_traj=limit)
    batch = collector.rollout()
    assert batch["observation"][0, :, 0].tolist() == [0, 1, 2, 3, 4]
    assert not batch["next", "done"].any()
    assert "step_count" not in batch.keys()
    assert collector.env is env  # no StepCounter around the env


def test_max_frames_per_traj_refuses_an_env_that_counts_steps():
    from tdrl.envs import StepCounter, TransformedEnv

    env = TransformedEnv(CountingEnv(), StepCounter())
    with pytest.raises(ValueError, match="counts steps already"):
        Collector(env, frames_per_batch=2, max_frames_per_traj=3)


def test_max_frames_per_traj_keeps_an_env_passed_in_open():
    env = CountingEnv(max_steps=100)
    collector = Collector(env, frames_per_batch=2, max_frames_per_traj=3)
    collector.shutdown()
    assert not env.is_closed


def test_split_trajs_pads_with_mask():
    collector = Collector(
        CountingEnv(batch_size=(2,), max_steps=3),
        frames_per_batch=8,
        total_frames=8,
        split_trajs=True,
    )
    batch = next(iter(collector))
    lengths = batch["collector", "mask"].sum(-1).tolist()
    assert sorted(lengths) == [1, 1, 3, 3]
    assert batch.batch_size == (4, 3)
    direct = split_trajectories(
        Collector(CountingEnv(batch_size=(2,), max_steps=3), frames_per_batch=8).rollout()
    )
    assert torch.equal(direct["observation"], batch["observation"])


def test_policy_random_frames_and_weights():
    net = torch.nn.Linear(1, 1)
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    calls = []

    def counting_policy(td):
        calls.append(1)
        return policy(td)

    collector = Collector(
        CountingEnv(batch_size=(2,), max_steps=50),
        counting_policy,
        frames_per_batch=4,
        total_frames=8,
        init_random_frames=4,
    )
    batches = [b.clone() for b in collector]
    # the constructor's call (as TorchRL's), a random batch, then 2 policy steps
    assert len(calls) == 3 and len(batches) == 2
    new = TensorDict.from_module(policy).clone().zero_()
    collector.policy = policy
    collector.update_policy_weights_(new)
    assert net.weight.abs().sum() == 0


def test_reset_at_each_iter_and_postproc():
    seen = []

    def post(batch):
        seen.append(batch["observation"][..., 0, 0].clone())
        return batch

    collector = Collector(
        CountingEnv(batch_size=(1,), max_steps=100),
        frames_per_batch=3,
        total_frames=6,
        reset_at_each_iter=True,
        postproc=post,
    )
    list(collector)
    assert [s.tolist() for s in seen] == [[0.0], [0.0]]


def test_replay_buffer_receives_batches():
    class Sink:
        def __init__(self):
            self.items = []

        def extend(self, data):
            self.items.append(data.clone())

    sink = Sink()
    collector = Collector(
        CountingEnv(batch_size=(2,)), frames_per_batch=4, total_frames=8, replay_buffer=sink
    )
    assert list(collector) == [None, None]
    assert [d.batch_size for d in sink.items] == [torch.Size([4])] * 2


def test_state_dict_round_trip_and_shutdown():
    collector = Collector(CountingEnv(batch_size=(2,)), frames_per_batch=4, total_frames=8)
    list(collector)
    state = collector.state_dict()
    other = Collector(CountingEnv(batch_size=(2,)), frames_per_batch=4, total_frames=16)
    other.load_state_dict(state)
    assert other.frames == 8 and len(list(other)) == 2
    collector.shutdown()
    collector.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        collector.rollout()


def test_nested_groups_reset_independently():
    env = NestedCountingEnv(batch_size=(2,), max_steps=6, nested_max_steps=(2, 3), n_agents=2)
    collector = Collector(env, frames_per_batch=16, total_frames=16)
    batch = next(iter(collector))
    assert ("next", "nested_1", "reward") in batch.keys(True, True)
    assert ("nested_2", "action") in batch.keys(True, True)
    assert batch["observation"][0, :, 0].tolist() == [0, 1, 2, 3, 4, 5, 0, 1]
    assert batch["nested_2", "observation"][0, :, 0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    agent0 = batch["nested_1", "observation"][0, :, 0, 0].tolist()
    assert agent0 == [0, 1, 0, 1, 0, 1, 0, 1]


def test_random_frames_keep_the_policy_entries_allocated():
    policy = TensorDictModule(torch.nn.Linear(1, 1), in_keys=["observation"], out_keys=["action"])

    def with_extra(td):
        td = policy(td)
        return td.set("action_log_prob", torch.full(td.batch_size, -1.0))

    collector = Collector(
        CountingEnv(batch_size=(2,), max_steps=50),
        with_extra,
        frames_per_batch=4,
        total_frames=8,
        init_random_frames=4,
    )
    first, second = (b.clone() for b in collector)
    assert first["action_log_prob"].eq(0).all()
    assert second["action_log_prob"].eq(-1).all()
