"""The action forms env.step accepts (TorchRL's) for every discrete spec, and what it refuses."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs.core import EnvBase
from tdrl.envs.transforms import StepCounter, TransformedEnv
from tdrl.errors import SpecError
from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)


class ActionEnv(EnvBase):
    """Records the action its ``_step`` receives."""

    def __init__(self, spec, batch_size=(), key="action", validate=False):
        super().__init__(batch_size=batch_size, validate=validate)
        self.observation_spec = Unbounded(shape=(*batch_size, 1))
        self.full_action_spec = Composite({key: spec}, shape=batch_size)
        self.reward_spec = Unbounded(shape=(*batch_size, 1))
        self.key = key
        self.seen: list[torch.Tensor] = []

    def _reset(self, td):
        return self.full_observation_spec.zero()

    def _step(self, td):
        self.seen.append(td[self.key])
        return TensorDict(
            observation=torch.zeros(*self.batch_size, 1),
            reward=torch.zeros(*self.batch_size, 1),
            done=torch.zeros(*self.batch_size, 1, dtype=torch.bool),
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


T = torch.tensor
# (spec, a value TorchRL takes in another dtype, the value in the spec's dtype)
ACCEPTED = [
    (OneHot(3, dtype=torch.int64), T([0.0, 1.0, 0.0]), T([0, 1, 0])),
    (OneHot(3, dtype=torch.int64), T([False, True, False]), T([0, 1, 0])),
    (OneHot(3), T([0, 0, 1]), T([False, False, True])),
    (OneHot(3), T([0.0, 0.0, 1.0]), T([False, False, True])),
    (Categorical(4), T(2.0), T(2)),
    (Categorical(4), T(3, dtype=torch.int32), T(3)),
    (Categorical(4), T(True), T(1)),
    (Categorical(2, dtype=torch.bool), T(1), T(True)),
    (MultiOneHot([2, 3]), T([1.0, 0.0, 0.0, 0.0, 1.0]), T([True, False, False, False, True])),
    (MultiCategorical([2, 3]), T([1.0, 2.0]), T([1, 2])),
    (MultiCategorical([2, 3]), T([1, 2], dtype=torch.int16), T([1, 2])),
    (Binary(3), T([1.0, 0.0, 1.0]), T([1, 0, 1], dtype=torch.int8)),
    (Binary(3), T([True, False, True]), T([1, 0, 1], dtype=torch.int8)),
    (Bounded(-1.0, 1.0, shape=(2,)), T([0.5, -0.25], dtype=torch.float64), T([0.5, -0.25])),
    (Bounded(-1.0, 1.0, shape=(1,)), T([1]), T([1.0])),
]
IDS = [f"{type(s).__name__}-{v.dtype}" for s, v, _ in ACCEPTED]


@pytest.mark.parametrize(("spec", "given", "expected"), ACCEPTED, ids=IDS)
def test_step_takes_other_dtypes_that_cast_exactly(spec, given, expected):
    env = ActionEnv(spec)
    td = env.reset()
    td["action"] = given.clone()
    out = env.step(td)
    seen = env.seen[-1]
    assert seen.dtype == spec.dtype and torch.equal(seen, expected)
    assert out is td and out["action"].dtype == given.dtype  # the caller's data is kept
    assert torch.equal(out["action"], given) and "next" in out.keys()


# (spec, a value TorchRL either refuses or silently turns into another action)
REFUSED = [
    (OneHot(3, dtype=torch.int64), T([0.3, 0.7, 0.0]), "holding only 0/1"),
    (OneHot(3, dtype=torch.int64), T([0.0, 2.0, 0.0]), "holding only 0/1"),
    (OneHot(3, dtype=torch.int64), T(1), "looks like a categorical index"),
    (OneHot(3), T([0, 1]), "Produce actions from env.action_spec"),
    (Categorical(4), T(1.5), "holding exactly those integers"),
    (Categorical(4), T([1]), r"got shape \(1,\)"),
    (Categorical(4), T([0, 1, 0, 0]), r"got shape \(4,\)"),
    (Categorical(2, dtype=torch.bool), T(2), "holding exactly those integers"),
    (Categorical(4, dtype=torch.int8), T(300), "holding exactly those integers"),
    (MultiOneHot([2, 3]), T([0.5, 0.5, 0.0, 0.0, 1.0]), "holding only 0/1"),
    (MultiCategorical([2, 3]), T([1.0, 0.5]), "holding exactly those integers"),
    (Binary(3), T([2.0, 0.0, 1.0]), "holding only 0/1"),
    (Bounded(-1.0, 1.0, shape=(1,)), T([True]), "another real dtype"),
]


@pytest.mark.parametrize(("spec", "given", "match"), REFUSED, ids=lambda x: str(x)[:24])
def test_step_refuses_values_that_would_change(spec, given, match):
    env = ActionEnv(spec)
    td = env.reset()
    td["action"] = given
    with pytest.raises(
        SpecError, match=rf"ActionEnv.step: action 'action' does not match.*{match}"
    ):
        env.step(td)
    assert env.seen == [] and "next" not in td.keys()
    env.step(env.rand_action(env.reset()))  # still usable


def test_cast_actions_are_validated_when_the_env_validates():
    env = ActionEnv(Categorical(3), validate=True)
    td = env.reset()
    td["action"] = T(5.0)  # an exact cast, out of the domain
    with pytest.raises(SpecError, match="out of range"):
        env.step(td)
    td["action"] = T(2.0)
    env.step(td)
    assert env.seen[-1].tolist() == 2


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_nested_and_batched_actions_are_cast_without_touching_the_caller(batch):
    key = ("agents", "action")
    env = ActionEnv(OneHot(3, shape=(*batch, 2, 3), dtype=torch.int64), batch, key)
    td = env.reset()
    action = env.full_action_spec[key].rand().float()
    td[key] = action
    env.step(td)
    assert env.seen[-1].dtype == torch.int64 and torch.equal(env.seen[-1], action.long())
    assert td[key] is action  # the caller's own tensor, untouched


def test_transformed_env_casts_once_and_steps_its_base_env():
    env = TransformedEnv(ActionEnv(OneHot(3, dtype=torch.int64)), StepCounter())
    td = env.reset()
    td["action"] = T([0.0, 0.0, 1.0])
    out = env.step(td)
    assert env.base_env.seen[-1].tolist() == [0, 0, 1]
    assert out["next", "step_count"].item() == 1 and out["action"].dtype == torch.float32
