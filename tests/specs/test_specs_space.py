"""``spec.space``: TorchRL's box objects (ContinuousBox, CategoricalBox, BoxList)."""

from __future__ import annotations

import torch

from tdrl.specs import (
    Binary,
    Bounded,
    BoxList,
    Categorical,
    CategoricalBox,
    ContinuousBox,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)


def test_bounded_space_holds_the_bounds():
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0])
    box = Bounded(low, high, shape=(2,)).space
    assert isinstance(box, ContinuousBox)
    assert torch.equal(box.low, low) and torch.equal(box.high, high)


def test_unbounded_space_is_the_whole_dtype_range():
    box = Unbounded(shape=(3,)).space
    assert isinstance(box, ContinuousBox) and box.low.shape == (3,)
    assert box.low.eq(-3.4028234663852886e38).all() and box.high.eq(3.4028234663852886e38).all()
    box = Unbounded(shape=(2,), dtype=torch.int64).space
    assert box.high.tolist() == [2**63 - 1] * 2 and box.low.dtype == torch.int64


def test_discrete_spaces_hold_the_number_of_categories():
    assert Categorical(5).space == CategoricalBox(5)
    assert OneHot(4, shape=(2, 4)).space.n == 4
    assert Binary(3).space == CategoricalBox(2)
    for spec in (MultiCategorical([2, 3]), MultiOneHot([2, 3])):
        space = spec.space
        assert isinstance(space, BoxList) and [b.n for b in space.boxes] == [2, 3]
    assert NonTensor(shape=()).space is None
