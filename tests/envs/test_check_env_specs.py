"""check_env_specs uses the env and the random generators as TorchRL's does: one rollout."""

from __future__ import annotations

import pytest
import torch

from tdrl.envs.core import check_env_specs
from tdrl.errors import SpecError
from tdrl.testing import CountingEnv


class ResetCounter(CountingEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.resets = 0

    def _reset(self, td):
        self.resets += 1
        return super()._reset(td)


def test_one_reset_and_the_draws_of_one_rollout():
    # TorchRL: env.rollout(3) and nothing else, so a seeded script goes on with the same draws
    env = ResetCounter(batch_size=(2,))
    torch.manual_seed(0)
    check_env_specs(env)
    after_check = torch.rand(3)
    assert env.resets == 1
    torch.manual_seed(0)
    ResetCounter(batch_size=(2,)).rollout(3)
    assert torch.equal(after_check, torch.rand(3))


def test_a_step_whose_keys_change_is_still_named():
    class Extra(CountingEnv):
        def _step(self, td):
            return super()._step(td).set("surprise", torch.zeros(2, 1))

    with pytest.raises(SpecError, match="surprise") as info:
        check_env_specs(Extra(batch_size=(2,)))
    assert info.value.__cause__ is not None  # the rollout's own error, kept
