"""ExplorationType / set_exploration_type: TorchRL's members and default."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, set_interaction_type

from tdrl.envs.core import ExplorationType, exploration_type, set_exploration_type


class _ShiftedMedian(torch.distributions.Normal):
    """A Normal whose median is told apart from its mean and mode (loc + 1)."""

    @property
    def median(self) -> torch.Tensor:
        return self.loc + 1.0


def test_set_exploration_type_defaults_to_deterministic():
    with set_exploration_type():
        assert exploration_type() is ExplorationType.DETERMINISTIC
    assert exploration_type() is ExplorationType.RANDOM


def test_median_is_a_member_and_reaches_probabilistic_modules():
    assert ExplorationType("median") is ExplorationType.MEDIAN
    module = ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"], out_keys=["action"], distribution_class=_ShiftedMedian
    )
    td = TensorDict(loc=torch.zeros(3), scale=torch.ones(3))
    with set_exploration_type(ExplorationType.MEDIAN):
        assert exploration_type() is ExplorationType.MEDIAN
        assert module(td.clone())["action"].tolist() == [1.0, 1.0, 1.0]


def test_tensordict_median_reads_as_median():
    with set_interaction_type(InteractionType.MEDIAN):
        assert exploration_type() is ExplorationType.MEDIAN
