"""TrajCounter: unique trajectory ids across resets, batch members, clones and workers."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from tdrl.envs import Compose, ParallelEnv, StepCounter, TrajCounter, TransformedEnv
from tdrl.testing import CountingEnv, TransformContract, TransformTestEnv


class TestTrajCounterContract(TransformContract):
    forward_mode = "raises"

    def make_transform(self, layout):
        return TrajCounter()


class TestTrajCounterPerAgentContract(TransformContract):
    forward_mode = "raises"
    layouts = ("nested",)

    def make_transform(self, layout):
        return TrajCounter(("agents", "traj_count"))


def _ids_per_member(td):
    """The set of ids each batch member saw in a rollout (time is the last batch dim)."""
    ids = torch.cat([td["traj_count"], td["next", "traj_count"]], -2)  # [*B, 2T, 1]
    return [set(row.tolist()) for row in ids.reshape(-1, ids.shape[-2])]


def test_episodes_of_one_env_get_consecutive_ids():
    env = TransformedEnv(CountingEnv(max_steps=100), Compose(StepCounter(3), TrajCounter()))
    td = env.rollout(9, break_when_any_done=False)
    # a StepCounter(3) truncation every 3 steps: 3 trajectories 0, 1, 2
    assert td["next", "traj_count"].flatten().tolist() == [0] * 3 + [1] * 3 + [2] * 3
    assert td["traj_count"].flatten().tolist() == [0] * 3 + [1] * 3 + [2] * 3
    assert env.full_observation_spec["traj_count"].dtype == torch.int64
    assert "traj_count" not in env.full_state_spec.keys(True)  # TorchRL: an observation only


def test_a_collector_carries_the_id_without_a_state_spec():
    from tdrl.collectors import Collector
    from tdrl.envs import SerialEnv

    env = SerialEnv(2, lambda: TransformedEnv(CountingEnv(max_steps=2), TrajCounter()))
    collector = Collector(env, None, frames_per_batch=8, total_frames=8)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
    # episodes of 2 steps: each row's ids change every 2 steps and the next id follows along
    ids = batch["traj_count"][..., 0]
    assert ids.shape == (2, 4) and batch["next", "traj_count"][..., 0].equal(ids)
    assert ids[:, 0::2].equal(ids[:, 1::2]) and (ids[:, 2:] > ids[:, :2]).all()


def test_ids_continue_across_rollouts():
    env = TransformedEnv(CountingEnv(max_steps=100), TrajCounter())
    first = env.rollout(2)["traj_count"].flatten().tolist()
    second = env.rollout(2)["traj_count"].flatten().tolist()
    assert (first, second) == ([0, 0], [1, 1])


def test_full_reset_numbers_the_batch_row_major():
    env = TransformedEnv(TransformTestEnv((2, 3)), TrajCounter())
    td = env.reset()
    assert td["traj_count"].shape == (2, 3, 1)
    assert td["traj_count"].flatten().tolist() == [0, 1, 2, 3, 4, 5]
    assert env.reset()["traj_count"].flatten().tolist() == [6, 7, 8, 9, 10, 11]


def test_partial_reset_gives_new_ids_only_to_the_reset_members():
    env = TransformedEnv(TransformTestEnv((4,)), TrajCounter())
    td = env.step_mdp(env.rand_step(env.reset()))
    td["_reset"] = torch.tensor([[False], [True], [False], [True]])
    out = env.reset(td)
    assert out["traj_count"].flatten().tolist() == [0, 4, 2, 5]


def test_ids_are_unique_across_members_and_partial_resets():
    # members end episodes at different steps (max_steps 2 and 3 alternate)
    env = TransformedEnv(TransformTestEnv((2, 3), max_steps=2), TrajCounter())
    td = env.rollout(12, break_when_any_done=False)
    seen = _ids_per_member(td)
    done = td["next", "done"].reshape(6, 12)
    for member, ids in enumerate(seen):
        # one id per trajectory: the first one plus one per done step but the last
        assert len(ids) == 1 + int(done[member, :-1].sum())
    assert sum(len(s) for s in seen) == len(set().union(*seen))  # disjoint members


def test_per_agent_counter_counts_agent_resets_only():
    env = TransformedEnv(TransformTestEnv((2,), nested=True), TrajCounter(("agents", "traj_count")))
    td = env.reset()
    assert td["agents", "traj_count"].flatten().tolist() == [0, 1, 2, 3]
    assert "traj_count" not in td.keys()
    td = env.step_mdp(env.rand_step(td))
    mask = torch.zeros(2, 2, 1, dtype=torch.bool)
    mask[1, 0] = True
    td["agents", "_reset"] = mask
    assert env.reset(td)["agents", "traj_count"].flatten().tolist() == [0, 1, 4, 3]


def test_clones_and_deep_copies_share_the_counter():
    t = TrajCounter()
    envs = [TransformedEnv(CountingEnv(), c) for c in (t.clone(), copy.deepcopy(t), t.clone())]
    assert [e.reset()["traj_count"].item() for e in envs] == [0, 1, 2]
    assert t.state_dict()["traj_count"].item() == 3


def test_a_pickled_copy_continues_from_the_current_value():
    env = TransformedEnv(CountingEnv(), TrajCounter())
    env.reset()
    other = pickle.loads(pickle.dumps(env))
    assert other.reset()["traj_count"].item() == 1
    assert env.reset()["traj_count"].item() == 1  # the copy's counter is its own


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_ids_are_unique_across_parallel_workers(method):
    t = TrajCounter()
    env = ParallelEnv(
        2,
        lambda: TransformedEnv(TransformTestEnv((2,), max_steps=2), t.clone()),
        mp_start_method=method,
        start_timeout=60.0,
        step_timeout=30.0,
    )
    try:
        td = env.rollout(10, break_when_any_done=False)
    finally:
        env.close()
    seen = _ids_per_member(td)
    assert all(len(s) >= 3 for s in seen)  # every member went through several trajectories
    assert sum(len(s) for s in seen) == len(set().union(*seen))
    # the workers took their ids from the counter of this process
    assert t.state_dict()["traj_count"].item() > max(max(s) for s in seen)


def test_state_dict_round_trip_restores_the_next_id():
    env = TransformedEnv(CountingEnv(), TrajCounter())
    for _ in range(3):
        env.reset()
    state = env.state_dict()
    assert [v.item() for v in state.values()] == [3]
    other = TransformedEnv(CountingEnv(), TrajCounter())
    other.load_state_dict(state)
    assert other.reset()["traj_count"].item() == 3


def test_load_state_dict_accepts_torchrl_int_and_rejects_garbage():
    t = TrajCounter()
    t.load_state_dict({"traj_count": 7})
    assert TransformedEnv(CountingEnv(), t).reset()["traj_count"].item() == 7
    with pytest.raises(RuntimeError, match="non-negative integer"):
        t.load_state_dict({"traj_count": -1})
    with pytest.raises(RuntimeError, match="traj_count"):
        t.load_state_dict({})


def test_repeats_other_than_none_is_refused():
    assert TrajCounter(repeats=None).repeats == 0
    with pytest.raises(NotImplementedError, match="repeats=2"):
        TrajCounter(repeats=2)


def test_out_key_without_a_matching_done_group_raises():
    with pytest.raises(KeyError, match="prefix"):
        TransformedEnv(CountingEnv(), TrajCounter(("agents", "traj_count")))


def test_step_without_the_id_raises():
    env = TransformedEnv(CountingEnv(), TrajCounter())
    td = env.reset().exclude("traj_count")
    with pytest.raises(KeyError, match="traj_count"):
        env.step(env.rand_action(td))
