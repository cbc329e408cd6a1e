"""Tests of Stacked: stacks of leaf specs whose shapes or domains differ."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.errors import SpecError
from tdrl.specs import Bounded, Categorical, Composite, OneHot, Stacked, Unbounded


def ragged() -> Stacked:
    return Stacked(Bounded(0.0, 1.0, shape=(3,)), Bounded(0.0, 1.0, shape=(5,)), dim=0)


def test_shape_marks_differing_dims_with_minus_one():
    spec = ragged()
    assert spec.shape == (2, -1) and spec.dtype == torch.float32 and len(spec) == 2
    assert Stacked(Unbounded((4, 2)), Unbounded((4, 3)), dim=1).shape == (4, 2, -1)
    assert spec == torch.stack([Bounded(0.0, 1.0, shape=(3,)), Bounded(0.0, 1.0, shape=(5,))])


def test_ragged_values_are_nested_tensors_checked_per_element():
    spec = ragged()
    value = spec.rand()
    assert value.is_nested
    parts = value.unbind(0)
    assert [p.shape for p in parts] == [(3,), (5,)]
    assert all(((p >= 0) & (p <= 1)).all() for p in parts)
    assert spec.is_in(value) and spec.is_in([torch.zeros(3), torch.ones(5)])
    assert not spec.is_in([torch.zeros(3), torch.full((5,), 2.0)])
    assert not spec.is_in([torch.zeros(3)])  # one value per spec
    with pytest.raises(SpecError, match="element 1 of dim 0"):
        spec.assert_is_in([torch.zeros(3), torch.full((5,), 2.0)])
    projected = spec.project([torch.zeros(3), torch.full((5,), 2.0)])
    assert projected.unbind(0)[1].tolist() == [1.0] * 5
    with pytest.raises(NotImplementedError, match="nested tensor along dim 0 only"):
        spec.rand((4,))
    assert spec.zero().unbind(0)[1].tolist() == [0.0] * 5


def test_same_shaped_values_stack_densely_on_any_dim():
    spec = torch.stack([Categorical(2, shape=(3,)), Categorical(5, shape=(3,))], 1)
    assert isinstance(spec, Stacked) and spec.shape == (3, 2)
    draws = spec.rand((1000,))
    assert draws.shape == (1000, 3, 2)
    assert draws[..., 0].max() == 1 and draws[..., 1].max() == 4
    assert spec.is_in(draws) and not spec.is_in(torch.tensor([[4, 0]] * 3))
    assert spec.project(torch.full((3, 2), 9)).tolist() == [[1, 4]] * 3
    assert spec[:, 1] == Categorical(5, shape=(3,))
    with pytest.raises(IndexError, match="only the stack dim"):
        spec[0]


def test_encode_to_numpy_type_check():
    spec = torch.stack([Unbounded(shape=(1,)), Unbounded(shape=(2,))], 0)
    value = spec.encode([np.array([1.0]), [2.0, 3.0]])
    assert [p.tolist() for p in value.unbind(0)] == [[1.0], [2.0, 3.0]]
    arrays = spec.to_numpy(value)
    assert [a.tolist() for a in arrays] == [[1.0], [2.0, 3.0]]
    dense = torch.stack([Categorical(2), Categorical(3)], 0)
    assert dense.encode(np.array([1, 2])).tolist() == [1, 2]
    assert dense.to_numpy(torch.tensor([1, 2])).tolist() == [1, 2]
    dense.type_check(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"Categorical\.type_check"):
        dense.type_check(torch.tensor([1.0, 2.0]))


def test_shape_ops_and_indexing():
    spec = ragged()
    assert spec[1] == Bounded(0.0, 1.0, shape=(5,)) and spec[0:1].shape == (1, 3)
    expanded = spec.expand(4, 2, -1)
    assert expanded.shape == (4, 2, -1) and expanded.dim == 1
    assert expanded.specs[1].shape == (4, 5)
    with pytest.raises(ValueError, match="trailing dims"):
        spec.expand(4, 3, -1)
    assert spec.unsqueeze(0).shape == (1, 2, -1) and spec.unsqueeze(0).squeeze() == spec
    assert spec.unsqueeze(-1).shape == (2, -1, 1) and spec.unsqueeze(-1).specs[0].shape == (3, 1)
    assert spec.clone() == spec and spec.clone().specs[0] is not spec.specs[0]
    assert spec.to(torch.float64).specs[1].dtype == torch.float64
    with pytest.raises(NotImplementedError, match="no single space"):
        _ = spec.space


def test_refuses_mixed_specs():
    with pytest.raises(ValueError, match="differ in class, dtype"):
        Stacked(Unbounded(shape=(3,)), OneHot(3), dim=0)
    with pytest.raises(TypeError, match="expected leaf specs"):
        Stacked(Composite(), Composite(), dim=0)


def test_composite_holds_a_stacked_leaf():
    spec = Composite(obs=torch.stack([Categorical(2), Categorical(5)], 0), shape=(2,))
    td = spec.rand()
    assert td["obs"].shape == (2,) and spec.is_in(td)
