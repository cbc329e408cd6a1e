"""The plain-TensorDict fast paths give exactly the data of the general code they shortcut.

Each env-level test runs the same steps twice: once with plain TensorDicts (fast paths) and once
with a TensorDict subclass, which every fast path declines (``type(td) is TensorDict`` fails), so
the general code runs; the data must be identical, partial resets included.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from tdrl.envs.core._fast import (
    all_true,
    exclude_flat,
    lookup,
    select_flat,
    stack_plain,
    truthy,
    update_flat,
)
from tdrl.envs.transforms import Compose, InitTracker, RewardSum, StepCounter, TransformedEnv
from tdrl.errors import SpecError
from tdrl.testing import CountingEnv, NestedCountingEnv, assert_same_data


class Slow(TensorDict):
    """A TensorDict the fast paths do not recognise: the general code handles it."""


def _slow(td: TensorDictBase) -> TensorDict:
    return Slow(td.to_dict(), batch_size=td.batch_size)


def _transformed(env_cls):
    def make(**kwargs):
        transforms = Compose(StepCounter(max_steps=4), RewardSum(), InitTracker())
        return TransformedEnv(env_cls(**kwargs), transforms)

    return make


ENVS = {
    "flat": CountingEnv,
    "nested": NestedCountingEnv,
    "flat_transformed": _transformed(CountingEnv),
    "nested_transformed": _transformed(NestedCountingEnv),
}


@pytest.mark.parametrize("batch", [(), (2, 3)])
@pytest.mark.parametrize("layout", sorted(ENVS))
def test_steps_and_partial_resets_match_the_general_path(layout, batch):
    kwargs = {"max_steps": 3} if layout.startswith("flat") else {}
    fast_env, slow_env = (
        ENVS[layout](batch_size=batch, **kwargs),
        ENVS[layout](batch_size=batch, **kwargs),
    )
    torch.manual_seed(0)
    actions = [fast_env.rand_action(fast_env.reset()) for _ in range(9)]
    fast, slow = fast_env.reset(), _slow(slow_env.reset())
    for i, step in enumerate(actions):  # every group finishes (partial resets) at least twice
        if i == 1 and batch:  # an explicit partial reset: the members run out of phase
            mask = torch.zeros(*batch, 1, dtype=torch.bool)
            mask[0] = True
            fast = fast_env.reset(fast.set("_reset", mask))
            slow = slow_env.reset(_slow(slow).set("_reset", mask))
            assert_same_data(fast, slow)
        fast.update(step.select(*fast_env.action_keys))
        slow = _slow(slow).update(step.select(*fast_env.action_keys))
        fast_data, fast = fast_env.step_and_maybe_reset(fast)
        # what step_and_maybe_reset runs (its root keeps the actions, as TorchRL's), with the
        # root made Slow again before the partial resets, so that they too take the general path
        slow_data = slow_env.step(slow)
        root = slow_env.step_mdp(slow_data).update(slow_data.select(*slow_env.action_keys))
        slow = slow_env.maybe_reset(_slow(root))
        assert type(slow_data) is Slow  # the general path ran
        assert_same_data(fast_data, slow_data)
        assert_same_data(fast, slow)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_rollout_stack_equals_tensordict_stack(batch):
    env = NestedCountingEnv(batch_size=batch)
    torch.manual_seed(0)
    data = env.rollout(7, break_when_any_done=False)
    torch.manual_seed(0)
    steps = []
    td = env.reset()
    for _ in range(7):
        td, nxt = env.step_and_maybe_reset(env.rand_action(td))
        steps.append(td)
        td = nxt
    assert_same_data(data, torch.stack(steps, len(batch)))  # type: ignore[arg-type]


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_stack_plain_equals_torch_stack(dim):
    steps = [
        TensorDict({"a": torch.randn(2, 3, 4), "n": {"b": torch.randn(2, 3)}}, [2, 3])
        for _ in range(5)
    ]
    got = stack_plain(steps, dim)
    assert got is not None
    assert_same_data(got, torch.stack(steps, dim))  # type: ignore[arg-type]


def test_stack_plain_declines_what_it_cannot_stack():
    base = TensorDict({"a": torch.zeros(2)}, [2])
    other_keys = TensorDict({"b": torch.zeros(2)}, [2])
    other_shape = TensorDict({"a": torch.zeros(2, 3)}, [2])
    lazy = LazyStackedTensorDict.lazy_stack([base, base.clone()], 0)
    assert stack_plain([base, other_keys], 0) is None
    assert stack_plain([base, other_shape], 0) is None
    assert stack_plain([lazy, lazy], 0) is None
    assert stack_plain([base, Slow({"a": torch.zeros(2)}, [2])], 0) is None
    assert stack_plain([base, base], 3) is None  # out of range: tensordict raises its error


def test_lookup_walks_plain_nodes_and_defers_to_others():
    inner = LazyStackedTensorDict.lazy_stack([TensorDict({"c": torch.ones(1)}, [])] * 2, 0)
    td = TensorDict({"a": {"b": torch.zeros(2, 1)}, "lazy": inner}, [2])
    assert lookup(td, ("a", "b")) is td.get(("a", "b"))
    assert lookup(td, ("a", "x")) is None and lookup(td, ("x",)) is None
    torch.testing.assert_close(lookup(td, ("lazy", "c")), td.get(("lazy", "c")))


def test_update_flat_equals_update():
    def make():
        return TensorDict({"x": torch.zeros(2), "n": {"y": torch.zeros(2)}}, [2])

    new = TensorDict({"x": torch.ones(2), "z": torch.ones(2)}, [2])
    assert_same_data(update_flat(make(), new), make().update(new))
    nested = TensorDict({"n": {"w": torch.ones(2)}}, [2])
    assert_same_data(update_flat(make(), nested), make().update(nested))  # merged, not replaced
    locked = make().lock_()
    with pytest.raises(RuntimeError):
        update_flat(locked, new)


def test_truthy_and_all_true_read_every_entry():
    assert truthy(torch.tensor([[False], [True]])) and not truthy(
        torch.zeros(3, 1, dtype=torch.bool)
    )
    assert truthy(torch.tensor(True))
    masks = [torch.tensor([[True], [True]]), torch.tensor([True])]
    assert all_true(masks)
    assert not all_true([*masks, torch.tensor([[True], [False]])])
    assert not all_true([*masks, None])


def test_select_and_exclude_flat_equal_tensordicts_own():
    td = TensorDict({"a": torch.zeros(2), "b": torch.ones(2), "n": {"c": torch.ones(2)}}, [2])
    for keys in (["a", "x"], ["n"], ["a", ("n", "c")]):
        assert_same_data(select_flat(td, keys), td.select(*keys, strict=False))
        assert_same_data(exclude_flat(td, keys), td.exclude(*keys))
    slow = _slow(td)
    assert_same_data(select_flat(slow, ["a"]), td.select("a"))


def test_a_transformed_env_still_checks_actions_once_for_both():
    env = TransformedEnv(CountingEnv(batch_size=(2,)), StepCounter())
    td = env.reset()
    td.set("action", torch.ones(2, 1, dtype=torch.bool))  # a dtype that does not cast
    with pytest.raises(SpecError, match=r"TransformedEnv\.step: action 'action'"):
        env.step(td)
    # a base env whose specs changed after wrapping checks its own actions again
    env.base_env.action_spec = env.base_env.action_spec.clone().to(torch.int64)
    td.set("action", torch.full((2, 1), 0.5))  # no exact int64
    with pytest.raises(SpecError, match=r"CountingEnv\.step: action 'action'"):
        env.step(td)
