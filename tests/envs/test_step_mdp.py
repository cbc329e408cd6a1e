"""step_mdp: the free function and the env's precomputed plan agree and never mutate input."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

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


# ------------------------------------------------- the fast paths keep the previous behaviour
def _is_node(value):
    return isinstance(value, TensorDictBase) and type(value).__name__ not in (
        "NonTensorData",
        "NonTensorStack",
    )


def _fingerprint(node):
    """Node types, batch sizes, devices and key order; leaves by identity (shared, not copied)."""
    entries = []
    for key in node.keys():
        value = node.get(key)
        entries.append([key, _fingerprint(value) if _is_node(value) else ["leaf", id(value)]])
    return [type(node), tuple(node.batch_size), node.device, entries]


def _paths(keys):
    return {(k,) if isinstance(k, str) else tuple(k) for k in keys}


def _expected(
    td,
    keep_other=True,
    exclude_reward=True,
    exclude_done=False,
    exclude_action=True,
    reward_keys=("reward",),
    done_keys=("done",),
    action_keys=("action",),
):
    """TorchRL's step_mdp spelled out as a fingerprint: "next" without the excluded keys (a
    new node per node, of the source node's type), then with ``keep_other`` the root entries it
    lacks (recursing into plain nodes), or without it the kept root actions it lacks."""
    drop = set()
    drop |= _paths(reward_keys) if exclude_reward else set()
    drop |= _paths(done_keys) if exclude_done else set()
    drop |= _paths(action_keys) if exclude_action else set()
    root_drop = drop | {("next",)}

    def copy_(node, prefix, names):
        entries = [
            [k, copy_(v, (*prefix, k), names) if _is_node(v) else ["leaf", id(v)]]
            for k, v in node.items()
            if (*prefix, k) not in names
        ]
        return [type(node), tuple(node.batch_size), node.device, entries]

    def fill(dest, node, prefix):
        present = dict(dest[3])
        for k, v in node.items():
            path = (*prefix, k)
            if path in root_drop:
                continue
            if k not in present:
                dest[3].append([k, copy_(v, path, root_drop) if _is_node(v) else ["leaf", id(v)]])
            elif _is_node(v) and present[k][0] is TensorDict:
                fill(present[k], v, path)

    out = copy_(td.get("next"), (), drop)
    if keep_other:
        fill(out, td, ())
    elif not exclude_action:
        for path in sorted(_paths(action_keys)):
            action = td.get(path, None)
            parent = out
            for part in path[:-1]:
                parent = dict(parent[3])[part]  # the test data holds every parent node
            if action is not None and path[-1] not in dict(parent[3]):
                parent[3].append([path[-1], ["leaf", id(action)]])
    return out


def _node_ids(td):
    return {id(td)} | {id(v) for v in td.values(True) if _is_node(v)}


def _rich_flat(batch):
    td = _flat(batch)
    td.set(("policy", "logits"), torch.ones(*batch, 2))  # a root-only node
    td.set(("next", "param"), torch.nn.Parameter(torch.ones(*batch, 1)))  # a Tensor subclass
    td["next"].set_non_tensor("info", "text")  # a non-tensor leaf
    return td, {"reward_keys": ["reward"], "done_keys": ["done"], "action_keys": ["action"]}


def _rich_nested(batch):
    env = NestedCountingEnv(batch_size=batch)
    td = env.rand_step()
    td.set("hidden", torch.ones(*batch, 4))
    td.set(("nested_1", "memory"), torch.ones(*batch, 3, 2))
    td.set(("next", "extra", "x"), torch.ones(*batch, 1))  # a next-only node
    td["next"].set("slow", _Slow({"y": torch.ones(*batch, 1)}, batch_size=batch))
    td.set(("next", "nested_2", "param"), torch.nn.Parameter(torch.ones(*batch, 1)))
    keys = {"reward_keys": env.reward_keys, "done_keys": env.done_keys}
    return td, {**keys, "action_keys": env.action_keys}


EQUAL_OPTIONS = [*OPTIONS, {"keep_other": False, "exclude_done": True}]


@pytest.mark.parametrize("options", EQUAL_OPTIONS)
@pytest.mark.parametrize("batch", [(), (2, 3)])
@pytest.mark.parametrize("layout", [_rich_flat, _rich_nested])
def test_every_path_keeps_the_previous_result(layout, batch, options):
    """The free function, a plan and the general path (a non-plain root) give TorchRL's
    result to the last detail: keys and their order, node types, batch sizes and devices,
    the input's very tensors, and new nodes only (nothing an output write could reach)."""
    td, keys = layout(batch)
    want = _expected(td, **keys, **options)
    before = _fingerprint(td)
    plan = StepMDP(**keys, **options)
    outs = [step_mdp(td, **keys, **options), plan(td), plan(td)]  # the second: a cached layout
    for out in outs:
        assert _fingerprint(out) == want
        assert not _node_ids(out) & _node_ids(td)
    slow = plan(_Slow(td.to_dict(retain_none=True), batch_size=batch))
    leaves = {k: slow.get(k) for k in slow.keys(True, True)}
    assert {k: outs[0].get(k) for k in outs[0].keys(True, True)}.keys() == leaves.keys()
    for key, value in leaves.items():
        got = outs[0].get(key)
        assert got is value or (torch.equal(got, value) and got.dtype == value.dtype), key
    assert _fingerprint(td) == before  # the input is untouched


@pytest.mark.parametrize("device", [None, torch.device("cpu")])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_the_node_wrapper_builds_what_tensordict_new_unsafe_builds(batch, device):
    from tdrl.envs.core._step_mdp import _wrap

    entries = {"x": torch.zeros(*batch, 1), "n": TensorDict({}, batch_size=batch)}
    size = torch.Size(batch)
    got = _wrap(dict(entries), size, device)
    want = TensorDict._new_unsafe(dict(entries), batch_size=size, device=device, nested=False)
    assert type(got) is type(want)
    assert type(got._tensordict) is type(want._tensordict)
    assert vars(got) == vars(want)  # every attribute, the entries dict included
    assert got.batch_size == size and got.device == device
    got["y"] = torch.ones(*batch, 2)  # a working tensordict: validating writes, reads
    assert got.get("x") is entries["x"] and got["y"].shape == (*batch, 2)


def _agent_step(i):
    return TensorDict(
        {
            "obs": torch.full((1,), float(i)),
            "action": torch.zeros(1),
            "hidden": torch.ones(1),
            "done": torch.zeros(1, dtype=torch.bool),
            "agents": {"obs": torch.zeros(1), "action": torch.ones(1), "memory": torch.ones(1)},
            "next": {
                "obs": torch.ones(1),
                "reward": torch.ones(1),
                "done": torch.ones(1, dtype=torch.bool),
                "agents": {
                    "obs": torch.full((1,), 2.0 + i),
                    "reward": torch.ones(1),
                    "done": torch.ones(1, dtype=torch.bool),
                },
            },
        },
        batch_size=[],
    )


@pytest.mark.parametrize("options", [*EQUAL_OPTIONS, {"exclude_done": True, "keep_other": True}])
def test_lazy_stacks_get_the_result_of_dense_data(options):
    """As TorchRL: the nested keys are excluded and the nested root entries carried on a lazy
    stack too (tdrl kept ("agents", "reward") and dropped ("agents", "memory") there)."""
    keys = {
        "reward_keys": ["reward", ("agents", "reward")],
        "done_keys": ["done", ("agents", "done")],
        "action_keys": ["action", ("agents", "action")],
    }
    steps = [_agent_step(0), _agent_step(1)]
    lazy = LazyStackedTensorDict(*steps, stack_dim=0)
    want = step_mdp(torch.stack(steps), **keys, **options)
    got = step_mdp(lazy, **keys, **options)
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert torch.equal(got.get(key), want.get(key)), key
    before = set(lazy.keys(True, True))
    got.set(("agents", "extra"), torch.zeros(2, 1))  # the output's nodes are its own
    got.exclude(("agents", "obs"), inplace=True)
    assert set(lazy.keys(True, True)) == before
