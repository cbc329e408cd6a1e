"""Spec constructors take TorchRL's positions and defaults."""

from __future__ import annotations

import pytest
import torch

from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)


def test_defaults_are_torchrl_s():
    assert Unbounded().shape == (1,)  # TorchRL: torch.Size([1])
    assert Unbounded(3).shape == (3,)
    assert Binary(3).dtype == torch.int8 and Binary(3).rand().dtype == torch.int8
    assert OneHot(3).dtype == torch.bool and Categorical(3).dtype == torch.int64


def test_positional_arguments_in_torchrl_order():
    # shape, device, dtype (Unbounded); low, high, shape, device, dtype (Bounded) ...
    assert Unbounded((2,), "cpu", torch.float64).dtype == torch.float64
    b = Bounded(-1.0, 1.0, (2,), "cpu", torch.float64)
    assert b.shape == (2,) and b.dtype == torch.float64
    c = Categorical(4, (3,), "cpu", torch.int32, torch.tensor([True, False, False, False]))
    assert c.dtype == torch.int32 and c.rand().eq(0).all()
    o = OneHot(3, (3,), "cpu", torch.int64, False, torch.tensor([False, True, False]))
    assert o.rand().tolist() == [0, 1, 0]
    assert Binary(2, (2,), "cpu", torch.bool).dtype == torch.bool
    mc = MultiCategorical([2, 3], (2,), "cpu", torch.int32, None, True)
    assert mc.dtype == torch.int32
    assert MultiOneHot([2, 3], (5,), "cpu", torch.int64, False).dtype == torch.int64


@pytest.mark.parametrize("cls", [OneHot, MultiOneHot])
def test_use_register_is_refused(cls):
    arg = 3 if cls is OneHot else [1, 2]
    with pytest.raises(ValueError, match=rf"{cls.__name__}.__init__: use_register=True"):
        cls(arg, use_register=True)


def test_method_parameters_have_torchrl_names_and_safe_checks():
    spec = Categorical(3)
    assert spec.is_in(val=torch.tensor(2)) and spec.project(val=torch.tensor(7)).item() == 2
    spec.assert_is_in(value=torch.tensor(1))
    assert spec.to_one_hot(torch.tensor(1), safe=True).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="Categorical"):
        spec.to_one_hot(torch.tensor(5), safe=True)
    onehot = OneHot(3)
    assert onehot.to_categorical(torch.tensor([False, True, False]), True).item() == 1
    with pytest.raises(ValueError, match="OneHot"):
        onehot.to_categorical(torch.tensor([True, True, False]), safe=True)


def test_non_tensor_and_composite_take_torchrl_arguments():
    from tdrl.specs import Composite, NonTensor

    spec = NonTensor((2,), None, None, "hi")
    assert spec.rand().data == "hi" and NonTensor().shape == (1,)
    with pytest.raises(ValueError, match=r"NonTensor.__init__: batched=True"):
        NonTensor(batched=True)
    assert Composite(a=Unbounded(), shape=None).shape == ()
    assert "names" not in Composite(a=Unbounded(), names=None).keys()
    with pytest.raises(ValueError, match=r"Composite.__init__: step_mdp_static=True"):
        Composite(step_mdp_static=True)


def test_composite_batch_size_is_torchrl_alias_of_shape():
    from tdrl.specs import Composite, Unbounded

    spec = Composite(obs=Unbounded(shape=(2, 3)), batch_size=(2,))
    assert spec.shape == (2,) and list(spec.keys()) == ["obs"]
    with pytest.raises(TypeError, match="both shape and batch_size"):
        Composite(shape=(2,), batch_size=(2,))
