"""RandomPolicy: random actions from a leaf or Composite spec, lazily set from an env."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs import RandomPolicy
from tdrl.envs.builtin import MaskedActionEnv
from tdrl.specs import Categorical
from tdrl.testing import MultiKeyEnv


def test_leaf_spec_writes_at_action_key_and_spec_is_cloned():
    spec = Categorical(4, shape=(200,))
    policy = RandomPolicy(spec, action_key="choice")
    spec.update_mask(torch.tensor([True, False, False, False]))  # the policy kept a clone
    from tensordict import TensorDict

    out = policy(TensorDict({}, [200]))
    assert out["choice"].shape == (200,) and set(out["choice"].tolist()) == {0, 1, 2, 3}


def test_composite_spec_writes_every_action_leaf():
    env = MultiKeyEnv(batch_size=(3,))
    td = RandomPolicy(env.full_action_spec)(env.reset())
    for key in env.action_keys:
        assert env.full_action_spec[key].is_in(td[key]), key
    assert env.rollout(3, RandomPolicy(env.full_action_spec)).batch_size == (3, 3)


def test_masked_spec_is_honoured():
    env = MaskedActionEnv(batch_size=(64,), categorical_action_encoding=True)
    td = env.reset()
    td = RandomPolicy(env.action_spec)(td)
    assert td["action_mask"].gather(-1, td["action"].unsqueeze(-1)).all()


def test_lazy_spec_from_env_and_error_without_spec():
    policy = RandomPolicy()
    env = MultiKeyEnv(batch_size=(2,))
    with pytest.raises(RuntimeError, match=r"RandomPolicy.__call__: no action spec"):
        policy(env.reset())
    policy.set_action_spec_from_env(env)
    assert set(policy(env.reset()).keys(True, True)) >= set(env.action_keys)
