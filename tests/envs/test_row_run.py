"""RowRun: rollouts of a gymnasium env written straight into preallocated rows give exactly the
data, the errors, the callbacks and the memory ownership of the general loop."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

import tdrl.envs.core._row_run as row_run
from tdrl.envs.libs import GymEnv
from tdrl.errors import SpecError
from tdrl.testing import assert_same_data


class GeneralGymEnv(GymEnv):
    """Overrides a hook: rollouts then use the public methods only (the general loop)."""

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        return super()._step(tensordict)


class Rows:
    """Records every RowRun a rollout starts (to check that the rows path ran)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[row_run.RowRun] = []
        start = row_run.RowRun.start

        def spy(*args, **kwargs):
            run = start(*args, **kwargs)
            if run is not None:
                self.runs.append(run)
            return run

        monkeypatch.setattr(row_run.RowRun, "start", staticmethod(spy))


CASES = {
    "cartpole_one_hot": ("CartPole-v1", {}),
    "cartpole_categorical": ("CartPole-v1", {"categorical_action_encoding": True}),
    "pendulum": ("Pendulum-v1", {"max_episode_steps": 90}),
}


def _pair(case: str) -> tuple[GymEnv, GymEnv]:
    name, kwargs = CASES[case]
    fast, slow = GymEnv(name, **kwargs), GeneralGymEnv(name, **kwargs)
    fast.set_seed(5)
    slow.set_seed(5)
    return fast, slow


def _actions(env: GymEnv, n: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [env.rand_action()["action"] for _ in range(n)]


def _replay(actions: list[torch.Tensor]):
    it = iter(actions)
    return lambda td: td.set("action", next(it).clone())


def _replay_changing(actions: list[torch.Tensor], change):
    """A policy factory: each policy replays ``actions`` and calls ``change(td, step)`` first."""

    def policy():
        count = iter(range(10**6))
        replay = _replay(actions)
        return lambda td: replay(change(td, next(count)))

    return policy


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("steps", [2, 33, 34, 64, 96, 97, 200])
@pytest.mark.parametrize("stop", [False, True])
def test_rollout_through_rows_equals_the_general_loop(monkeypatch, case, steps, stop):
    rows = Rows(monkeypatch)
    fast, slow = _pair(case)
    actions = _actions(fast, 2 * steps)
    lengths = []
    for i in range(2):  # twice: the second rollout goes on from the env's state
        replay = actions[i * steps :]
        a = fast.rollout(steps, _replay(replay), break_when_any_done=stop)
        b = slow.rollout(steps, _replay(replay), break_when_any_done=stop)
        assert_same_data(a, b)
        lengths.append(a.batch_size[0])
    # rows run when the run may be long enough (short runs are cheaper in the general loop):
    # from step 1 without a stop at done, else from step 32 when no done came before
    warm = 32 if stop else 1
    started = [steps - warm >= row_run.MIN_ROWS and n > warm for n in lengths]
    assert len(rows.runs) == sum(started)
    assert all(run.env is fast for run in rows.runs)


def test_a_long_run_that_stops_at_a_done_grows_its_rows(monkeypatch):
    rows = Rows(monkeypatch)
    # 150-step episodes: the rows start at step 31 and grow past their first 64
    fast = GymEnv("Pendulum-v1", max_episode_steps=150)
    slow = GeneralGymEnv("Pendulum-v1", max_episode_steps=150)
    fast.set_seed(5)
    slow.set_seed(5)
    actions = _actions(fast, 200)
    a = fast.rollout(200, _replay(actions), break_when_any_done=True)
    b = slow.rollout(200, _replay(actions), break_when_any_done=True)
    assert_same_data(a, b)
    assert a.batch_size == (150,) and rows.runs[0].t == 150 - 31


def test_set_truncated_and_auto_reset_false(monkeypatch):
    Rows(monkeypatch)
    fast, slow = _pair("cartpole_categorical")
    actions = _actions(fast, 120)
    for kwargs in ({"set_truncated": True}, {"set_truncated": True, "break_when_any_done": False}):
        assert_same_data(
            fast.rollout(120, _replay(actions), **kwargs),
            slow.rollout(120, _replay(actions), **kwargs),
        )
    td_f, td_s = fast.reset(), slow.reset()
    assert_same_data(
        fast.rollout(30, _replay(actions), auto_reset=False, tensordict=td_f),
        slow.rollout(30, _replay(actions), auto_reset=False, tensordict=td_s),
    )


@pytest.mark.parametrize("stop", [False, True])
def test_a_policy_that_changes_what_it_writes_mid_run_falls_back(monkeypatch, stop):
    """From step 50 the policy replaces the observation it was given by a copy (the rows can
    only take the tensors they handed out): the rows end there, the general loop goes on with
    the same data."""
    rows = Rows(monkeypatch)
    fast, slow = _pair("pendulum")
    actions = _actions(fast, 80)

    def copy_from_50(td, step):
        return td.set("observation", td.get("observation") * 1.0) if step >= 50 else td

    policy = _replay_changing(actions, copy_from_50)

    a = fast.rollout(80, policy(), break_when_any_done=stop)
    b = slow.rollout(80, policy(), break_when_any_done=stop)
    assert_same_data(a, b)
    assert rows.runs and rows.runs[0].t == (50 - 31 if stop else 50)


def test_a_policy_that_edits_its_input_in_place_sees_the_same_effects(monkeypatch):
    """The policy scales the observation it is given in place: in both loops the change reaches
    the root entry of this step and the "next" entry of the step before."""
    rows = Rows(monkeypatch)
    fast, slow = _pair("cartpole_categorical")
    actions = _actions(fast, 50)

    def policy():
        replay = _replay(actions)

        def act(td):
            td.get("observation").mul_(2.0)
            return replay(td)

        return act

    a = fast.rollout(50, policy(), break_when_any_done=False)
    b = slow.rollout(50, policy(), break_when_any_done=False)
    assert_same_data(a, b)
    assert rows.runs and rows.runs[0].t == 50


@pytest.mark.parametrize("stop", [False, True])
def test_callbacks_see_the_same_roots(monkeypatch, stop):
    rows = Rows(monkeypatch)
    fast, slow = _pair("pendulum")
    actions = _actions(fast, 80)
    seen: dict[str, list[TensorDictBase]] = {"fast": [], "slow": []}

    def record(name):
        return lambda env, td: seen[name].append(td.clone())

    fast.rollout(80, _replay(actions), break_when_any_done=stop, callback=record("fast"))
    slow.rollout(80, _replay(actions), break_when_any_done=stop, callback=record("slow"))
    assert rows.runs
    assert len(seen["fast"]) == len(seen["slow"]) > 0
    for x, y in zip(seen["fast"], seen["slow"]):
        assert_same_data(x, y)


@pytest.mark.parametrize("bad", ["shape", "dtype"])
def test_a_wrong_action_raises_the_general_error_and_the_env_stays_usable(monkeypatch, bad):
    rows = Rows(monkeypatch)
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    good = torch.tensor(1)
    wrong = torch.tensor([1, 0]) if bad == "shape" else torch.tensor(1.5)  # 1.0 would cast
    count = iter(range(10**6))

    def act(td):
        return td.set("action", wrong if next(count) == 40 else good)

    with pytest.raises(SpecError, match="action"):
        env.rollout(60, act, break_when_any_done=False)
    assert rows.runs and rows.runs[0].t == 40  # the rows took the first 40 steps
    out = env.rollout(60, lambda td: td.set("action", good), break_when_any_done=False)
    assert out.batch_size == (60,)


def test_results_are_fresh_memory_owned_by_the_caller(monkeypatch):
    Rows(monkeypatch)
    env = GymEnv("CartPole-v1")
    env.set_seed(1)
    actions = _actions(env, 200)
    kept: list[TensorDictBase] = []

    def act(td):
        kept.append(td)
        return td.set("action", actions[len(kept) - 1])

    first = env.rollout(100, act, break_when_any_done=False)
    saved = first.clone()
    second = env.rollout(100, act, break_when_any_done=False)
    assert_same_data(first, saved)  # the second rollout wrote nowhere the first one lives
    for x, y in zip(first.values(True, True), second.values(True, True)):
        assert x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    # every input the policy received is still what the rollout recorded for that step
    for t in range(1, 100):
        torch.testing.assert_close(kept[t]["observation"], first["observation"][t])


def test_layouts_the_rows_cannot_hold_use_the_general_loop(monkeypatch):
    rows = Rows(monkeypatch)
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    a = torch.tensor(0)

    def grad_obs(td):  # the policy swaps the observation for one that requires grad
        td.set("observation", td.get("observation").clone().requires_grad_(True))
        return td.set("action", a)

    out = env.rollout(50, grad_obs, break_when_any_done=False)
    assert out.batch_size == (50,) and not rows.runs
    assert out["observation"].requires_grad  # kept as the general loop keeps it


def test_a_non_contiguous_observation_from_gymnasium_is_copied(monkeypatch):
    class Strided(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.arange(6, dtype=np.float32)[::2] / 10, {}

        def step(self, action):
            self.t += 1
            obs = (np.arange(6, dtype=np.float32)[::2] + self.t) / 10
            return obs, float(action), self.t % 4 == 0, False, {}

    gym.register("tdrl-test/Strided-v0", entry_point=Strided)
    rows = Rows(monkeypatch)
    fast, slow = GymEnv("tdrl-test/Strided-v0"), GeneralGymEnv("tdrl-test/Strided-v0")
    actions = _actions(fast, 60)
    assert_same_data(
        fast.rollout(60, _replay(actions), break_when_any_done=False),
        slow.rollout(60, _replay(actions), break_when_any_done=False),
    )
    assert rows.runs


@pytest.mark.parametrize("steps", [0, -3])
def test_a_rollout_needs_at_least_one_step(steps):
    env = GymEnv("CartPole-v1")
    with pytest.raises(ValueError, match=f"max_steps must be at least 1 \\(got {steps}"):
        env.rollout(steps)
    assert env.rollout(3).batch_size[0] >= 1  # still usable


@pytest.mark.parametrize("stop", [False, True])
def test_other_policy_outputs_are_carried_and_stacked(monkeypatch, stop):
    """A policy writing a mean and a log-prob beside the action (as stochastic actors do):
    step_mdp carries them to the next root, the rows stack them like the actions. Every third
    step the policy leaves the carried mean as it is."""
    rows = Rows(monkeypatch)
    fast = GymEnv("Pendulum-v1", max_episode_steps=50)
    slow = GeneralGymEnv("Pendulum-v1", max_episode_steps=50)
    fast.set_seed(0)
    slow.set_seed(0)

    def policy():
        count = iter(range(10**6))
        gen = torch.Generator().manual_seed(0)

        def act(td):
            i = next(count)
            if i % 3 or "loc" not in td.keys():
                td.set("loc", td["observation"][..., :1].tanh() * 2)
            noise = torch.randn(1, generator=gen)
            td.set("sample_log_prob", -noise.square().sum())
            return td.set("action", (td["loc"] + noise).clamp(-2, 2))

        return act

    assert_same_data(
        fast.rollout(150, policy(), break_when_any_done=stop),
        slow.rollout(150, policy(), break_when_any_done=stop),
    )
    assert rows.runs


def test_other_outputs_that_change_shape_fall_back(monkeypatch):
    rows = Rows(monkeypatch)
    fast, slow = _pair("pendulum")
    actions = _actions(fast, 80)

    policy = _replay_changing(
        actions, lambda td, step: td.set("extra", torch.zeros(1 if step < 40 else 2))
    )

    with pytest.raises(RuntimeError):  # the general loop cannot stack them either
        slow.rollout(80, policy(), break_when_any_done=False)
    with pytest.raises(RuntimeError):
        fast.rollout(80, policy(), break_when_any_done=False)
    assert rows.runs and rows.runs[0].t == 40


class CountingResets(GymEnv):
    """A subclass changing a method the rows stand in for: it keeps the general path."""

    def maybe_reset(self, tensordict):
        self.calls = getattr(self, "calls", 0) + 1
        return super().maybe_reset(tensordict)


def test_a_subclass_overriding_a_bypassed_method_keeps_the_general_path(monkeypatch):
    rows = Rows(monkeypatch)
    env = CountingResets("CartPole-v1")
    env.rollout(50, break_when_any_done=False)
    # its maybe_reset ran at every step but the last (TorchRL: a plain step ends the run)
    assert not rows.runs and env.calls == 49
