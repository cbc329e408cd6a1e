"""ActionMask: the action spec follows the env's mask; bad specs are reported."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import ActionMask, EnvBase, MaskedActionEnv, TransformedEnv
from tdrl.specs import Bounded, Categorical, Composite, MultiCategorical, MultiOneHot, OneHot
from tdrl.testing import TransformContract, TransformTestEnv


class TestActionMaskContract(TransformContract):
    forward_mode = "raises"

    def make_transform(self, layout):
        if layout == "nested":
            return ActionMask(("agents", "action"), ("agents", "action_mask"))
        return ActionMask()


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_random_actions_stay_legal(batch):
    env = TransformedEnv(TransformTestEnv(batch, max_steps=6), ActionMask())
    torch.manual_seed(0)
    td = env.rollout(12, break_when_any_done=False)
    legal = td["action_mask"].gather(-1, td["action"].unsqueeze(-1))
    assert legal.all()
    assert td["action"].max() > 0  # the masks open up over time


def test_nested_agents_masks():
    env = TransformedEnv(
        TransformTestEnv((3,), nested=True, max_steps=6),
        ActionMask(("agents", "action"), ("agents", "action_mask")),
    )
    td = env.rollout(10, break_when_any_done=False)
    legal = td["agents", "action_mask"].gather(-1, td["agents", "action"].unsqueeze(-1))
    assert legal.all()


class _Masked(EnvBase):
    """One step of a discrete env whose action spec is given."""

    def __init__(self, action, mask_shape, mask_dtype=torch.bool):
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(
            action_mask=Bounded(0, 1, shape=mask_shape, dtype=mask_dtype), shape=(2,)
        )
        self.action_spec = action
        self.reward_spec = Bounded(0.0, 1.0, shape=(2, 1))
        self.done_spec = self.default_done_spec()
        self.mask_shape = mask_shape

    def _reset(self, td):
        # the last value of every sub-action is the only legal one
        mask = torch.zeros(self.mask_shape, dtype=torch.bool)
        ends = [1, 4] if isinstance(self.action_spec, (MultiCategorical, MultiOneHot)) else [-1]
        mask[..., ends] = True
        return TensorDict(action_mask=mask, batch_size=(2,))

    def _step(self, td):
        out = self._reset(None)
        out["reward"] = torch.zeros(2, 1)
        return out

    def _set_seed(self, seed):
        pass


@pytest.mark.parametrize(
    "action,mask_shape,last",
    [
        (Categorical(3, shape=(2,)), (2, 3), 2),
        (OneHot(3, shape=(2, 3)), (2, 3), [False, False, True]),
        (MultiCategorical([2, 3], shape=(2, 2)), (2, 5), [1, 2]),
        (MultiOneHot([2, 3], shape=(2, 5)), (2, 5), [False, True, False, False, True]),
    ],
)
def test_every_discrete_spec_kind(action, mask_shape, last):
    env = TransformedEnv(_Masked(action, mask_shape), ActionMask())
    act = env.rand_action(env.reset())["action"]
    assert env.full_action_spec["action"].is_in(act)
    assert act[0].tolist() == last
    assert env.base_env.action_spec.mask is None  # the base env's spec is left alone


def test_non_discrete_action_and_bad_mask_are_reported():
    with pytest.raises(TypeError, match=r"ActionMask.*'action'.*Bounded.*discrete"):
        TransformedEnv(_Masked(Bounded(0.0, 1.0, shape=(2, 1)), (2, 3)), ActionMask())
    with pytest.raises(ValueError, match=r"ActionMask.*mask 'action_mask'.*\(2, 4\).*\(2, 3\)"):
        TransformedEnv(_Masked(Categorical(3, shape=(2,)), (2, 4)), ActionMask())
    with pytest.raises(ValueError, match=r"ActionMask.*torch.float32"):
        TransformedEnv(_Masked(Categorical(3, shape=(2,)), (2, 3), torch.float32), ActionMask())
    with pytest.raises(KeyError, match=r"ActionMask.in_keys: key 'legal'.*available keys"):
        TransformedEnv(_Masked(Categorical(3, shape=(2,)), (2, 3)), ActionMask(mask_key="legal"))


def test_builtin_masked_env_never_terminates_with_random_actions():
    env = TransformedEnv(
        MaskedActionEnv(batch_size=(8,), categorical_action_encoding=True), ActionMask()
    )
    torch.manual_seed(0)
    td = env.rollout(30, break_when_any_done=False)
    assert not td["next", "terminated"].any()
    assert td["next", "reward"].ge(0).all()
    onehot = TransformedEnv(MaskedActionEnv(batch_size=(8,)), ActionMask())
    assert not onehot.rollout(30, break_when_any_done=False)["next", "terminated"].any()
