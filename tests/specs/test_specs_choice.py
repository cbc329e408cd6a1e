"""Tests of Choice: values from one of several specs or non-tensor values."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData

from tdrl.errors import SpecError
from tdrl.specs import Bounded, Categorical, Choice, Unbounded


def two_boxes() -> Choice:
    return Choice([Bounded(0.0, 1.0, shape=(2,)), Bounded(10.0, 11.0, shape=(2,))])


def test_rand_picks_one_choice_per_call_uniformly():
    spec = two_boxes()
    draws = torch.stack([spec.rand() for _ in range(400)])
    low = (draws <= 1).all(-1)
    high = (draws >= 10).all(-1)
    assert bool((low | high).all())  # both entries of one draw come from the same choice
    assert 120 < int(low.sum()) < 280  # about half each (binomial(400, 0.5): sd 10)
    assert spec.rand((3,)).shape == (3, 2)


def test_zero_one_is_in_and_assert():
    spec = two_boxes()
    assert spec.zero().tolist() == [0.0, 0.0] and spec.one().tolist() == [1.0, 1.0]
    assert spec.is_in(torch.tensor([0.5, 0.5])) and spec.is_in(torch.tensor([10.5, 11.0]))
    assert not spec.is_in(torch.tensor([0.5, 10.5]))
    with pytest.raises(SpecError, match="in none of the 2 choices"):
        spec.assert_is_in(torch.tensor([5.0, 5.0]), key="goal")
    assert spec.num_choices == 2 and spec.shape == (2,) and spec.dtype == torch.float32
    with pytest.raises(NotImplementedError, match=r"Choice\.project"):
        spec.project(torch.zeros(2))


def test_non_tensor_choices():
    spec = Choice([NonTensorData(s) for s in ["a", "b", "c"]])
    seen = {spec.rand().data for _ in range(200)}
    assert seen == {"a", "b", "c"}
    assert spec.is_in(NonTensorData("b")) and not spec.is_in(NonTensorData("z"))
    assert spec.zero().data == "a" and spec.one().data == "b" and spec.cardinality() == 3


def test_shape_ops_apply_to_every_choice():
    spec = Choice([Categorical(2, shape=(3,)), Categorical(2, shape=(3,))])
    assert spec.cardinality() == 4
    expanded = spec.expand(4, 3)
    assert expanded.shape == (4, 3) and all(c.shape == (4, 3) for c in expanded.choices)
    assert spec.unsqueeze(0).shape == (1, 3) and spec.unsqueeze(0).squeeze() == spec
    assert spec[0].shape == () and spec.to(torch.int32).dtype == torch.int32
    assert spec.clone() == spec and spec.clone().choices[0] is not spec.choices[0]


def test_bad_choices_are_refused():
    with pytest.raises(TypeError, match="non-empty list"):
        Choice((Unbounded(),))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="different types"):
        Choice([Unbounded(shape=(1,)), Categorical(3, shape=(1,))])
    with pytest.raises(ValueError, match="different shapes"):
        Choice([Unbounded(shape=(1,)), Unbounded(shape=(2,))])
    with pytest.raises(TypeError, match="neither a spec nor non-tensor data"):
        Choice(["a", "b"])  # type: ignore[list-item]
