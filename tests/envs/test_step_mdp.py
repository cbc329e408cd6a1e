"""step_mdp: the free function and the env's precomputed plan agree and never mutate input."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.core import StepMDP, step_mdp
from tdrl.testing import NestedCountingEnv


def _flat(batch=(2,)):
    return TensorDict(
        {
            "obs": torch.zeros(*batch, 3),
            "action": torch.ones(*batch, 1),
            "hidden": torch.full((*batch, 4), 7.0),
            "done": torch.zeros(*batch, 1, dtype=torch.bool),
            "next": {
                "obs": torch.ones(*batch, 3),
                "reward": torch.ones(*batch, 1),
                "done": torch.ones(*batch, 1, dtype=torch.bool),
            },
        },
        batch_size=batch,
    )


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_flat_defaults(batch):
    td = _flat(batch)
    out = step_mdp(td)
    assert set(out.keys()) == {"obs", "hidden", "done"}
    assert out["obs"].eq(1).all() and out["done"].all() and out["hidden"].eq(7).all()
    assert out.batch_size == torch.Size(batch)


def test_flags():
    td = _flat()
    assert "reward" in step_mdp(td, exclude_reward=False).keys()
    assert "done" not in step_mdp(td, exclude_done=True).keys()
    assert "action" in step_mdp(td, exclude_action=False).keys()
    assert set(step_mdp(td, keep_other=False).keys()) == {"obs", "done"}


def test_input_not_mutated_and_nested_nodes_are_copies():
    env = NestedCountingEnv(batch_size=(2,))
    td = env.rand_step()
    before = set(td.keys(True, True))
    out = env.step_mdp(td)
    out.set(("nested_1", "action"), torch.zeros(2, 3, 1))
    out.set(("nested_1", "extra"), torch.zeros(2, 3, 1))
    assert set(td.keys(True, True)) == before
    assert ("nested_1", "extra") not in td["next"].keys(True)


def test_env_plan_equals_free_function_on_nested_data():
    env = NestedCountingEnv(batch_size=(2,))
    td = env.rand_step()
    mine = env.step_mdp(td)
    free = step_mdp(
        td, reward_keys=env.reward_keys, done_keys=env.done_keys, action_keys=env.action_keys
    )
    assert set(mine.keys(True, True)) == set(free.keys(True, True))
    for key in mine.keys(True, True):
        assert torch.equal(mine[key], free[key])
    assert ("nested_1", "reward") not in mine.keys(True, True)
    assert ("nested_1", "action") not in mine.keys(True, True)
    assert ("nested_1", "observation") in mine.keys(True, True)


def test_nested_single_key_as_tuple_and_next_tensordict():
    td = TensorDict(
        {
            "agents": {"r": torch.ones(2)},
            "next": {"agents": {"r": torch.ones(2), "o": torch.ones(2)}},
        },
        batch_size=[2],
    )
    out = step_mdp(td, reward_keys=("agents", "r"))
    assert set(out.keys(True, True)) == {("agents", "o")}
    dest = TensorDict({"keep": torch.zeros(2)}, [2])
    res = step_mdp(td, dest, reward_keys=[("agents", "r")])
    assert res is dest and ("agents", "o") in dest.keys(True, True) and "keep" in dest.keys()


def test_missing_next_raises():
    with pytest.raises(KeyError, match=r"no 'next' entry.*available keys"):
        StepMDP()(TensorDict({"obs": torch.zeros(1)}, [1]))


def _with_term(batch=(2,)):
    td = _flat(batch)
    td["terminated"] = torch.zeros(*batch, 1, dtype=torch.bool)
    td["next", "terminated"] = torch.ones(*batch, 1, dtype=torch.bool)
    return td


def test_exclude_done_drops_only_the_named_done_keys():
    # TorchRL: done_keys defaults to "done": exclude_done=True keeps "terminated" (from "next")
    out = step_mdp(_with_term(), exclude_done=True)
    assert set(out.keys()) == {"obs", "hidden", "terminated"}
    assert out["terminated"].all()
    out = step_mdp(_with_term(), exclude_done=True, done_keys=["done", "terminated"])
    assert set(out.keys()) == {"obs", "hidden"}


def test_kept_action_survives_keep_other_false():
    out = step_mdp(_flat(), keep_other=False, exclude_action=False)
    assert set(out.keys()) == {"obs", "done", "action"}
    assert out["action"].eq(1).all()
    plan = StepMDP(keep_other=False, exclude_action=False)
    assert set(plan(_flat()).keys()) == {"obs", "done", "action"}


def test_arguments_are_positional_in_torchrl_order():
    td = _flat()
    # tensordict, next_tensordict, keep_other, exclude_reward, exclude_done, exclude_action
    out = step_mdp(td, None, False, False, True, False)
    assert set(out.keys()) == {"obs", "reward", "action"}
    out = step_mdp(td, None, True, True, False, True, "reward", "done", "hidden")
    assert set(out.keys()) == {"obs", "done", "action"}


class _Slow(TensorDict):
    """Declined by the fast merge (not a plain TensorDict): the general code runs."""


OPTIONS = [
    {},
    {"keep_other": False},
    {"exclude_done": True},
    {"exclude_action": False},
    {"exclude_reward": False, "keep_other": False, "exclude_action": False},
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_fast_merge_equals_the_general_path(batch, options):
    env = NestedCountingEnv(batch_size=batch)
    td = env.rand_step()
    td.set("hidden", torch.ones(*batch, 4))  # root-only entries, flat and nested
    td.set(("nested_1", "memory"), torch.ones(*batch, 3, 2))
    td.set(("policy", "logits"), torch.ones(*batch, 2))
    td.set(("next", "extra", "x"), torch.ones(*batch, 1))  # a next-only node
    plan = StepMDP(
        reward_keys=env.reward_keys,
        done_keys=env.done_keys,
        action_keys=env.action_keys,
        **options,
    )
    fast = plan(td)
    slow = plan(_Slow(td.to_dict(), batch_size=td.batch_size))
    assert set(fast.keys(True, True)) == set(slow.keys(True, True))
    for key in slow.keys(True, True):
        assert fast.get(key) is slow.get(key), key  # same tensors, shared with the input


def test_a_copied_plan_starts_without_the_layout_plans_of_the_original():
    env = NestedCountingEnv(batch_size=(2,))
    td = env.rand_step()
    want = env.step_mdp(td)
    for twin in (copy.deepcopy(env._step_mdp), pickle.loads(pickle.dumps(env._step_mdp))):
        assert twin._plans == {}  # they were keyed by the original's tree ids
        got = twin(td)
        assert set(got.keys(True, True)) == set(want.keys(True, True))


def test_a_list_of_keys_and_a_nested_key_spelled_alike_keep_their_own_plans():
    """``["reward"]`` (one key) and ``("list", "reward")`` (a nested key) are different
    arguments: the second call must not reuse the first one's cached plan."""
    td = TensorDict(
        {
            "obs": torch.zeros(2),
            "next": {
                "obs": torch.ones(2),
                "reward": torch.ones(2),
                "list": {"reward": torch.ones(2)},
            },
        },
        batch_size=[],
    )
    first = step_mdp(td, reward_keys=["reward"], keep_other=False)
    second = step_mdp(td, reward_keys=("list", "reward"), keep_other=False)
    assert "reward" not in first.keys() and ("list", "reward") in first.keys(True)
    assert "reward" in second.keys() and ("list", "reward") not in second.keys(True)


def _with_next_actions(batch=(2,)):
    td = _flat(batch)
    td["next", "action"] = torch.full((*batch, 1), 5.0)  # e.g. written by a policy or transform
    td["agents", "action"] = torch.ones(*batch, 1)
    td["next", "agents", "action"] = torch.full((*batch, 1), 5.0)
    return td


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_exclude_action_drops_the_actions_under_next_too(batch):
    # TorchRL: the excluded keys are dropped from the root and from "next"
    keys = ["action", ("agents", "action")]
    for out in (
        step_mdp(_with_next_actions(batch), action_keys=keys),
        step_mdp(_with_next_actions(batch), action_keys=keys, keep_other=False),
        StepMDP(action_keys=keys)(_with_next_actions(batch)),
    ):
        assert "action" not in out.keys()
        assert ("agents", "action") not in out.keys(True, True)
        assert "obs" in out.keys()
    out = step_mdp(_with_next_actions(batch))  # only the named keys are excluded
    assert "action" not in out.keys() and out["agents", "action"].eq(5).all()


def test_env_plan_drops_actions_written_under_next():
    env = NestedCountingEnv(batch_size=(2,))
    td = env.rand_step()
    for key in env.action_keys:
        path = ("next", key) if isinstance(key, str) else ("next", *key)
        td[path] = torch.zeros_like(td[key])
    out = env.step_mdp(td)
    assert not set(env.action_keys) & set(out.keys(True, True))


def test_a_kept_action_under_next_wins_over_the_root_one():
    # TorchRL copies the root entries first, then the "next" ones over them
    td = _with_next_actions()
    for out in (
        step_mdp(td, keep_other=False, exclude_action=False),
        step_mdp(td, exclude_action=False),
    ):
        assert out["action"].eq(5).all()
