"""ParallelEnv.step_and_maybe_reset builds the caller's outputs while the workers step: same
results as the two-trip version, fresh outputs, and the caller's data untouched on failure."""

from __future__ import annotations

import functools
import os

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from tdrl.envs.batched import ParallelEnv, SerialEnv
from tdrl.envs.core import EnvBase
from tdrl.envs.libs import GymEnv
from tdrl.envs.transforms import StepCounter, TransformedEnv
from tdrl.errors import WorkerError
from tdrl.testing import CountingEnv, FailingEnv, NestedCountingEnv, assert_same_data

pytestmark = pytest.mark.timeout(60)

KWARGS = {"batch_size": (2,), "nested_max_steps": (2, 3), "max_steps": 4}


def _zero(env: EnvBase, td: TensorDict) -> TensorDict:
    return td.update(env.full_action_spec.zero())


def test_matches_the_two_trip_version_over_partial_resets():
    with ParallelEnv(3, NestedCountingEnv, KWARGS, mp_start_method="fork") as env:
        ref = SerialEnv(3, NestedCountingEnv, KWARGS)
        td, td_ref = env.reset(), ref.reset()
        for _ in range(11):
            extra = torch.arange(6.0).reshape(3, 2)  # an entry no spec declares rides along
            td.set("extra", extra)
            td_ref.set("extra", extra.clone())
            stepped, td = env.step_and_maybe_reset(_zero(env, td))
            stepped_ref, td_ref = EnvBase.step_and_maybe_reset(ref, _zero(ref, td_ref))
            assert_same_data(stepped, stepped_ref)
            assert_same_data(td, td_ref)
            assert td["extra"].flatten().tolist() == list(range(6))


def test_outputs_are_fresh_and_survive_later_steps():
    with ParallelEnv(2, CountingEnv, {"max_steps": 3}, mp_start_method="fork") as env:
        td = env.reset()
        kept = []
        for _ in range(7):
            stepped, td = env.step_and_maybe_reset(env.rand_action(td))
            kept.append((stepped["next"].clone(), stepped["next"]))
        for copy, original in kept:
            assert_same_data(original, copy)  # nothing written into them afterwards
        leaves = {t.data_ptr() for _, nxt in kept for t in nxt.values(True, True)}
        shared = {t.data_ptr() for t in env._buffers.next.leaves}
        assert not leaves & shared


def test_a_worker_error_leaves_the_callers_data_as_it_was():
    factories = [CountingEnv, FailingEnv]
    with ParallelEnv(2, factories, [{}, {"fail_after": 2}], mp_start_method="fork") as env:
        td = env.reset()
        stepped, td = env.step_and_maybe_reset(env.rand_action(td))  # starts the workers
        stepped, td = env.step_and_maybe_reset(env.rand_action(td))
        before = td.clone()
        with pytest.raises(WorkerError, match="worker 1"):
            env.step_and_maybe_reset(env.rand_action(td))
        assert "next" not in td.keys()
        assert_same_data(td.exclude("action"), before.exclude("action"))
        # with a "next" entry already there, it is the one kept
        stepped.set("marker", torch.ones(2))
        nxt = stepped["next"]
        with pytest.raises(WorkerError):
            env.step_and_maybe_reset(stepped)
        assert stepped["next"] is nxt
        assert env.reset()["observation"].eq(0).all()  # the workers keep running


def test_a_dead_worker_closes_the_env_and_keeps_the_callers_data():
    class Exit(CountingEnv):
        def _step(self, td):
            os._exit(3)

    env = ParallelEnv(2, [CountingEnv, Exit], mp_start_method="fork")
    td = env.rand_action(env.reset())  # the workers run
    with pytest.raises(WorkerError, match="died with exit code 3"):
        env.step_and_maybe_reset(td)
    assert "next" not in td.keys() and env.is_closed


def _running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_other_tensordict_types_take_the_base_method():
    with ParallelEnv(2, CountingEnv, {"max_steps": 2}, mp_start_method="fork") as env:
        ref = SerialEnv(2, CountingEnv, {"max_steps": 2})
        td, td_ref = env.reset(), ref.reset()
        for _ in range(4):
            lazy = LazyStackedTensorDict.lazy_stack(list(env.rand_action(td).unbind(0)), 0)
            stepped, td = env.step_and_maybe_reset(lazy)
            stepped_ref, td_ref = ref.step_and_maybe_reset(
                td_ref.set("action", lazy["action"].clone())
            )
            assert_same_data(stepped["next"].to_tensordict(), stepped_ref["next"])
            assert_same_data(td.to_tensordict(), td_ref)


def _counting_pair():
    return ParallelEnv(2, CountingEnv, mp_start_method="fork"), SerialEnv(2, CountingEnv)


def _act(td: TensorDict) -> TensorDict:
    return td.set("action", torch.ones(2, 1))


@pytest.mark.parametrize("with_next", [False, True])
def test_a_locked_tensordict_fails_as_in_the_base_method_and_the_env_goes_on(with_next):
    env, ref = _counting_pair()
    with env:
        tds = [e.reset() for e in (env, ref)]
        for _ in range(2):
            tds = [e.step_and_maybe_reset(_act(td))[1] for e, td in zip((env, ref), tds)]
        errors = []
        for e, td in zip((env, ref), tds):
            td = _act(td)
            if with_next:
                td.set("next", e.step(td.clone())["next"])
            td.lock_()
            with pytest.raises(RuntimeError) as info:
                e.step_and_maybe_reset(td)
            errors.append(str(info.value))
            td.unlock_()
        assert errors[0] == errors[1]
        outs = [e.step_and_maybe_reset(_act(td)) for e, td in zip((env, ref), tds)]
        assert_same_data(outs[0][0], outs[1][0])
        assert env.set_seed(3) == ref.set_seed(3)  # the pipes are in step


def test_an_error_while_building_the_outputs_keeps_the_env_in_step(monkeypatch):
    from tdrl.envs.batched._shared import TreeBuffer

    env, ref = _counting_pair()
    with env:
        td = env.step_and_maybe_reset(_act(env.reset()))[1]  # the workers run
        before = td.clone()

        def broken(self):
            raise RuntimeError("no memory left")

        monkeypatch.setattr(TreeBuffer, "empty", broken)
        with pytest.raises(RuntimeError, match="no memory left"):
            env.step_and_maybe_reset(_act(td))
        monkeypatch.undo()
        assert "next" not in td.keys() and not env.is_closed
        assert_same_data(td.exclude("action"), before.exclude("action"))
        stepped, root = env.step_and_maybe_reset(_act(td.clone()))
        stepped_ref, root_ref = ref.step_and_maybe_reset(_act(td.clone()))
        assert_same_data(stepped, stepped_ref)
        assert_same_data(root, root_ref)
        assert env.set_seed(3) == ref.set_seed(3)  # the pipes are in step


def test_ctrl_c_while_building_the_outputs_closes_the_env(monkeypatch):
    from tdrl.envs.batched._shared import TreeBuffer

    env = ParallelEnv(2, CountingEnv, mp_start_method="fork")
    td = env.step_and_maybe_reset(env.rand_action(env.reset()))[1]
    pids = env.worker_pids

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(TreeBuffer, "empty", interrupted)
    with pytest.raises(KeyboardInterrupt):
        env.step_and_maybe_reset(env.rand_action(td))
    assert env.is_closed and "next" not in td.keys()
    assert not any(os.path.exists(f"/proc/{p}/stat") and _running(p) for p in pids)


def test_dim_names_take_the_copying_set_and_give_the_same_data():
    with ParallelEnv(2, CountingEnv, {"max_steps": 3}, mp_start_method="fork") as env:
        ref = SerialEnv(2, CountingEnv, {"max_steps": 3})
        td, td_ref = env.reset(), ref.reset()
        for _ in range(5):
            td = env.rand_action(td).refine_names("env")
            td_ref = td_ref.set("action", td["action"].clone())
            stepped, td = env.step_and_maybe_reset(td)
            stepped_ref, td_ref = ref.step_and_maybe_reset(td_ref)
            assert_same_data(stepped["next"], stepped_ref["next"])
            assert_same_data(td, td_ref)


class _General(GymEnv):
    """Overrides a method the row writer stands in for: its steps take the general path."""

    def _step(self, tensordict):
        return super()._step(tensordict)


def _counted(general: bool) -> TransformedEnv:
    base = (_General if general else GymEnv)("CartPole-v1", categorical_action_encoding=True)
    return TransformedEnv(base, StepCounter())


@pytest.mark.parametrize("kinds", [(False, False), (False, True)], ids=["rows", "mixed"])
def test_the_inputs_the_sub_envs_read_reach_them(kinds):
    # Only the input leaves the row writers read are copied in (here the actions and the step
    # counts); with a sub-env without a writer, every leaf is. An edited step count must reach
    # every sub-env either way, as it reaches the general path's.
    factories = [functools.partial(_counted, g) for g in kinds]
    with ParallelEnv(2, factories, mp_start_method="fork") as env:
        ref = SerialEnv(2, functools.partial(_counted, True))
        env.set_seed(0)
        ref.set_seed(0)
        td, td_ref = env.reset(), ref.reset()
        for t in range(30):
            action = torch.tensor([t % 2, (t + 1) % 2])
            td.set("action", action)
            td_ref.set("action", action.clone())
            if t == 5:
                td["step_count"] += 10
                td_ref["step_count"] += 10
            stepped, td = env.step_and_maybe_reset(td)
            stepped_ref, td_ref = ref.step_and_maybe_reset(td_ref)
            assert_same_data(stepped, stepped_ref)
            assert_same_data(td, td_ref)
        assert stepped_ref["next", "step_count"].max() > 10  # the edit was carried
