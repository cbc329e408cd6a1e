"""TransformedRows: a TransformedEnv of a gymnasium env with StepCounter/RewardSum steps into
rows (rollouts, collectors, batched envs) with exactly the data of the general path."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDictBase

import tdrl.collectors._rows as rows_module
import tdrl.envs.core._row_run as row_run
from tdrl.collectors import Collector
from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.libs import GymEnv
from tdrl.envs.transforms import (
    Compose,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from tdrl.envs.transforms._rows import TransformedRows
from tdrl.testing import assert_same_data


class GeneralGymEnv(GymEnv):
    """Overrides a hook: no rows, the general path everywhere."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return super()._step(tensordict)


class MyCounter(StepCounter):
    """A subclass may change what the step does: it keeps the general path."""


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[row_run.RowRun]:
    runs: list[row_run.RowRun] = []
    start = row_run.RowRun.start

    def spy(*args, **kwargs):
        run = start(*args, **kwargs)
        if run is not None:
            runs.append(run)
        return run

    monkeypatch.setattr(row_run.RowRun, "start", staticmethod(spy))
    return runs


def _make(base_cls, name="Pendulum-v1", max_steps=None, episode=60, extra=()):
    def make():
        base = base_cls(name, max_episode_steps=episode)
        return TransformedEnv(base, Compose(StepCounter(max_steps), RewardSum(), *extra))

    return make


def _replay(actions):
    it = iter(actions)
    return lambda td: td.set("action", next(it).clone())


def _actions(env, n):
    torch.manual_seed(0)
    return [env.rand_action()["action"] for _ in range(n)]


@pytest.mark.parametrize("max_steps", [None, 25])
@pytest.mark.parametrize("stop", [False, True])
def test_rollouts_equal_the_general_path(monkeypatch, max_steps, stop):
    runs = _runs(monkeypatch)
    fast, slow = _make(GymEnv, max_steps=max_steps)(), _make(GeneralGymEnv, max_steps=max_steps)()
    fast.set_seed(2)
    slow.set_seed(2)
    actions = _actions(fast, 400)
    for i in range(2):
        part = actions[i * 200 :]
        a = fast.rollout(200, _replay(part), break_when_any_done=stop)
        b = slow.rollout(200, _replay(part), break_when_any_done=stop)
        assert_same_data(a, b)
    assert isinstance(fast._row_writer(*_buffers(fast)), TransformedRows)
    # rows ran without a stop; with one only episodes past 32 steps reach them
    assert runs if not stop or max_steps is None else not runs


def _buffers(env):
    td = env.rollout(2, break_when_any_done=False)
    nxt = td.get("next").exclude("action")
    return nxt, td.exclude("next", "action")


def test_a_policy_that_edits_the_sums_in_place_sees_the_same_data(monkeypatch):
    runs = _runs(monkeypatch)
    fast, slow = _make(GymEnv)(), _make(GeneralGymEnv)()
    fast.set_seed(4)
    slow.set_seed(4)
    actions = _actions(fast, 100)

    def policy():
        replay = _replay(actions)

        def act(td):
            td.get("episode_reward").mul_(0.5)  # the transforms read the edited root value
            td.get("step_count").add_(2)
            return replay(td)

        return act

    assert_same_data(
        fast.rollout(100, policy(), break_when_any_done=False),
        slow.rollout(100, policy(), break_when_any_done=False),
    )
    assert runs


@pytest.mark.parametrize(
    ("transform", "rows"),
    [
        (lambda: StepCounter(10, update_done=False), False),
        (lambda: MyCounter(), False),
        (lambda: ObservationNorm(loc=torch.zeros(3), scale=torch.ones(3)), False),
        (lambda: RewardSum(out_keys=["total"], reset_keys=["_reset"]), True),
    ],
    ids=["no_update_done", "subclass", "other_transform", "named_sum"],
)
def test_which_transforms_have_rows(monkeypatch, transform, rows):
    runs = _runs(monkeypatch)
    fast = TransformedEnv(GymEnv("Pendulum-v1"), transform())
    slow = TransformedEnv(GeneralGymEnv("Pendulum-v1"), transform())
    fast.set_seed(1)
    slow.set_seed(1)
    actions = _actions(fast, 80)
    assert_same_data(
        fast.rollout(80, _replay(actions), break_when_any_done=False),
        slow.rollout(80, _replay(actions), break_when_any_done=False),
    )
    assert bool(runs) == rows


def test_collector_batches_equal_the_general_path(monkeypatch):
    finished = []
    finish = rows_module.CollectorRows.finish

    def spy(rows, data):
        finished.append(1)
        return finish(rows, data)

    monkeypatch.setattr(rows_module.CollectorRows, "finish", spy)
    out = {}
    for name, make in (
        ("fast", _make(GymEnv, max_steps=30)),
        ("slow", _make(GeneralGymEnv, max_steps=30)),
    ):
        env = make()
        env.set_seed(7)
        torch.manual_seed(0)
        collector = Collector(env, None, frames_per_batch=100, total_frames=300)
        out[name] = [b.clone() for b in collector]
        out[name + "_ids"] = collector.state_dict()["next_traj_id"]
    for a, b in zip(out["fast"], out["slow"], strict=True):
        assert_same_data(a, b)
    assert out["fast_ids"] == out["slow_ids"]
    assert len(finished) == 3


@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_batched_envs_of_transformed_gym_envs(kind):
    cls = SerialEnv if kind == "serial" else ParallelEnv
    kwargs = {} if kind == "serial" else {"mp_start_method": "fork"}
    fast = cls(2, _make(GymEnv, max_steps=15, episode=25), **kwargs)
    slow = SerialEnv(2, _make(GeneralGymEnv, max_steps=15, episode=25))
    try:
        fast.set_seed(3)
        slow.set_seed(3)
        if kind == "serial":
            assert all(isinstance(r._writer, TransformedRows) for r in fast._runners)
        actions = _actions(fast, 60)
        assert_same_data(
            fast.rollout(60, _replay(actions), break_when_any_done=False),
            slow.rollout(60, _replay(actions), break_when_any_done=False),
        )
    finally:
        fast.close()
        slow.close()


def test_a_batched_step_missing_an_entry_the_rows_read_raises_the_general_error():
    """The rows of a sub-env never read what an earlier step left in the input buffer: without
    the running count, the step fails as the general path does, and the env stays usable."""
    env = SerialEnv(2, _make(GymEnv))
    try:
        td = env.rand_action(env.reset())
        with pytest.raises(KeyError, match="step_count"):
            env.step(td.select("action"))
        assert env.step(env.rand_action(env.reset()))["next", "step_count"].tolist() == [[1], [1]]
    finally:
        env.close()


class DoubledReward(TransformedEnv):
    """A subclass changing what a step gives: it keeps the general path (its own _step runs)."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = super()._step(tensordict)
        return out.set("reward", out["reward"] * 2)


def test_a_transformed_env_subclass_keeps_the_general_path(monkeypatch):
    runs = _runs(monkeypatch)
    env = DoubledReward(GymEnv("Pendulum-v1"), Compose(StepCounter(), RewardSum()))
    plain = GymEnv("Pendulum-v1")
    env.set_seed(1)
    plain.set_seed(1)
    actions = _actions(env, 60)
    got = env.rollout(60, _replay(actions), break_when_any_done=False)
    assert not runs
    want = plain.rollout(60, _replay(actions), break_when_any_done=False)
    assert torch.equal(got["next", "reward"], 2 * want["next", "reward"])  # at every step
    # the transforms ran inside the base _step, on the reward before the doubling
    assert torch.allclose(got["next", "episode_reward"], want["next", "reward"].cumsum(0))
