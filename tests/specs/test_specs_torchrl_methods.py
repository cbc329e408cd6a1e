"""TorchRL's spec methods and arguments: encode(ignore_device=), to_numpy, type_check, ..."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

from tdrl.errors import SpecError
from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)

LEAVES = [
    Unbounded(shape=(2,)),
    Bounded(-1.0, 1.0, shape=(2,)),
    Categorical(3, shape=(2,)),
    OneHot(3),
    MultiCategorical([2, 3]),
    MultiOneHot([2, 3]),
    Binary(3),
]


@pytest.mark.parametrize("spec", LEAVES, ids=lambda s: type(s).__name__)
def test_to_numpy_is_the_numpy_array_of_the_value(spec):
    value = spec.rand()
    out = spec.to_numpy(value)
    assert isinstance(out, np.ndarray)
    if isinstance(spec, (OneHot, MultiOneHot)):  # TorchRL: the categorical indices
        assert out.tolist() == spec.to_categorical(value).tolist()
    else:
        assert out.shape == tuple(value.shape) and out.tolist() == value.tolist()
    assert spec.encode(out).tolist() == value.tolist()


def test_one_hot_specs_encode_indices_and_to_numpy_gives_them_back():
    # TorchRL: OneHot.encode one-hot encodes categorical indices (a gym Discrete value)
    spec = OneHot(3, dtype=torch.int64)
    assert spec.encode(np.int64(1)).tolist() == [0, 1, 0]
    assert spec.encode([2, 0]).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert spec.encode(torch.tensor(2.0)).tolist() == [0, 0, 1]
    assert OneHot(3).encode(1).dtype == torch.bool
    assert spec.to_numpy(torch.tensor([[0, 0, 1], [1, 0, 0]])).tolist() == [2, 0]
    with pytest.raises(SpecError, match=r"OneHot.encode: an index is out of range"):
        spec.encode(3)
    with pytest.raises(SpecError, match=r"OneHot.encode: the values are not categorical"):
        spec.encode(1.5)
    multi = MultiOneHot([2, 3])
    assert multi.encode(np.array([1, 2])).tolist() == [False, True, False, False, True]
    assert multi.encode([[0, 0], [1, 1]]).long().tolist() == [[1, 0, 1, 0, 0], [0, 1, 0, 1, 0]]
    assert multi.to_numpy(multi.encode([1, 2])).tolist() == [1, 2]
    with pytest.raises(SpecError, match=r"MultiOneHot.encode: an index is out of range"):
        multi.encode([2, 0])
    with pytest.raises(SpecError, match=r"one index per sub-action is needed"):
        multi.encode([1, 0, 0, 0, 1])


def test_to_numpy_safe_checks_the_value_first():
    spec = Bounded(0.0, 1.0, shape=(2,))
    bad = torch.tensor([0.5, 3.0])
    assert spec.to_numpy(bad).tolist() == [0.5, 3.0]  # safe=None: no check, as TorchRL
    with pytest.raises(SpecError, match="out of bounds"):
        spec.to_numpy(bad, safe=True)


@pytest.mark.parametrize("spec", LEAVES, ids=lambda s: type(s).__name__)
def test_type_check_compares_dtypes_only(spec):
    spec.type_check(spec.rand())
    spec.type_check(spec.rand().to(spec.dtype)[..., :1])  # shape is not checked
    other = torch.float64 if spec.dtype != torch.float64 else torch.float32
    with pytest.raises(TypeError, match=rf"{type(spec).__name__}.type_check: value for key 'k'"):
        spec.type_check(spec.rand().to(other), "k")


def test_encode_ignore_device_keeps_data_off_the_spec_device():
    spec = Unbounded(shape=(2,), device="meta")
    assert spec.encode(np.zeros(2)).device.type == "meta"
    assert spec.encode(np.zeros(2), ignore_device=True).device.type == "cpu"
    out = spec.encode(torch.zeros(2, dtype=torch.int64), ignore_device=True)
    assert out.device.type == "cpu" and out.dtype == torch.float32
    nt = NonTensor(device="meta")
    assert (
        nt.encode("x").device.type == "meta" and nt.encode("x", ignore_device=True).device is None
    )


def test_composite_encode_ignore_device_and_val_name():
    spec = Composite(a=Unbounded(shape=(2,)), device="meta")
    assert spec.encode(val={"a": [1.0, 2.0]}).device.type == "meta"
    td = spec.encode({"a": [1.0, 2.0]}, ignore_device=True)
    assert td.device is None and td["a"].device.type == "cpu" and td["a"].tolist() == [1.0, 2.0]


def test_non_tensor_to_numpy_returns_the_value():
    spec = NonTensor(example_data="a")
    value = NonTensorData("a", batch_size=(1,))
    assert spec.to_numpy(value) is value
    with pytest.raises(SpecError, match="not non-tensor data"):
        spec.to_numpy("a", safe=True)


def test_categorical_and_one_hot_conversions_to_their_own_form_are_no_ops():
    cat = Categorical(3, shape=(2,))
    idx = torch.tensor([0, 2])
    assert cat.to_categorical(idx) is idx and cat.to_categorical_spec() is cat
    with pytest.raises(SpecError, match="out of range"):
        cat.to_categorical(torch.tensor([0, 3]), safe=True)
    onehot = OneHot(3)
    vec = torch.tensor([False, True, False])
    assert onehot.to_one_hot(vec) is vec and onehot.to_one_hot_spec() is onehot
    with pytest.raises(SpecError, match="not one-hot"):
        onehot.to_one_hot(torch.tensor([True, True, False]), safe=True)
    multi = MultiCategorical([2, 3])
    assert multi.to_categorical_spec() is multi and multi.to_categorical(idx) is idx
    multi_oh = MultiOneHot([2, 3])
    assert multi_oh.to_one_hot_spec() is multi_oh


def test_default_dtypes_follow_torch_default_like_torchrl():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert Unbounded().dtype == torch.float64
        assert Bounded(0, 1, shape=(2,)).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert Bounded(0, 1, shape=(2,)).dtype == torch.float32
    assert Categorical(3, None).shape == ()


def test_bounded_without_bounds_is_refused():
    with pytest.raises(TypeError, match=r"Bounded.__init__: both bounds are required"):
        Bounded(shape=(2,))
    with pytest.raises(TypeError, match="high=None"):
        Bounded(low=0.0, shape=(2,))


def nested() -> Composite:
    return Composite(
        a=Unbounded(),
        b=Composite(c=Unbounded(), d=Categorical(3)),
        e=Composite(),
    )


def test_composite_keys_is_leaf_and_step_mdp_static_only():
    spec = nested()
    # default: every class but Composite is a leaf
    assert spec.keys(True, True) == ["a", ("b", "c"), ("b", "d")]
    only_cat = spec.keys(True, True, is_leaf=lambda cls: cls is Categorical)
    assert only_cat == [("b", "d")]
    assert spec.keys(leaves_only=True, is_leaf=lambda cls: True) == ["a", "b", "e"]
    assert spec.values(True, True, is_leaf=lambda cls: cls is Unbounded) == [
        spec["a"],
        spec["b", "c"],
    ]
    assert [k for k, _ in spec.items(True, True, is_leaf=lambda cls: cls is Categorical)] == [
        ("b", "d")
    ]
    # no tdrl composite is step_mdp_static, so nothing is filtered (as TorchRL for those)
    assert spec.keys(True, True, step_mdp_static_only=True) == spec.keys(True, True)


def test_composite_set_update_take_torchrl_names():
    spec = Composite()
    spec.set(name="x", spec=Unbounded())
    spec.update(dict_or_spec={"y": Unbounded()})
    assert spec.keys() == ["x", "y"]


def test_composite_is_empty():
    assert Composite().is_empty() and Composite().is_empty(recurse=True)
    spec = Composite(a=Composite(b=Composite()))
    assert not spec.is_empty() and spec.is_empty(recurse=True)
    assert not nested().is_empty(True)


def test_composite_lock_recurse():
    spec = nested()
    spec.lock_(recurse=False)
    assert spec.is_locked and not spec["b"].is_locked
    spec["b", "z"] = Unbounded()  # the nested composite stays writable
    with pytest.raises(RuntimeError, match="locked"):
        spec["z"] = Unbounded()
    spec.lock_()  # recurse=None means True, as TorchRL
    assert spec["b"].is_locked
    spec.unlock_(recurse=False)
    assert not spec.is_locked and spec["b"].is_locked
    spec.unlock_()
    assert not spec["b"].is_locked


def test_composite_to_numpy_and_type_check():
    spec = Composite(a=Unbounded(shape=(2,)), b=Composite(c=Categorical(3)))
    out = spec.to_numpy(spec.zero())
    assert out["a"].tolist() == [0.0, 0.0] and out["b"]["c"].tolist() == 0
    with pytest.raises(SpecError, match="out of range"):
        spec.to_numpy(TensorDict(b=TensorDict(c=torch.tensor(5))), safe=True)
    td = spec.zero()
    spec.type_check(td)
    spec.type_check(torch.zeros(2), "a")
    td["a"] = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(TypeError, match="value for key 'a'"):
        spec.type_check(td)
    spec.type_check(td, selected_keys=["b"])
    td["b", "c"] = torch.tensor(0.0)
    with pytest.raises(TypeError, match="value for key 'c'"):
        spec.type_check(td, "b")
    with pytest.raises(TypeError, match=r"Composite.type_check: value is not a TensorDict"):
        spec.type_check(torch.zeros(2))


def test_make_composite_from_td_unsqueezes_null_shapes_like_torchrl():
    from tdrl.specs import make_composite_from_td

    td = TensorDict(r=torch.tensor(1.0), obs=torch.zeros(3), sub=TensorDict(x=torch.tensor(2)))
    spec = make_composite_from_td(data=td)
    assert spec["r"].shape == (1,) and spec["sub", "x"].shape == (1,)
    assert spec["obs"].shape == (3,) and spec["sub", "x"].dtype == torch.int64
    kept = make_composite_from_td(td, unsqueeze_null_shapes=False)
    assert kept["r"].shape == () and kept["sub", "x"].shape == () and kept.is_in(td)
    batched = make_composite_from_td(TensorDict(r=torch.zeros(4), batch_size=[4]))
    assert batched["r"].shape == (4,)  # only null shapes change
    with pytest.raises(NotImplementedError, match="dynamic_shape=True is not supported"):
        make_composite_from_td(td, dynamic_shape=True)


# TorchRL's is_in answers a 0-d bool tensor for the specs that check a domain over the data, a
# Python bool for the others, and False (a bool) when the type, shape or dtype is wrong.
TENSOR_IS_IN = [
    (Bounded(-1.0, 1.0, shape=(2,)), torch.tensor([0.5, -1.0]), torch.tensor([0.5, 2.0])),
    (Categorical(3, shape=(2,)), torch.tensor([0, 2]), torch.tensor([0, 3])),
    (
        Categorical(3, shape=(2,), mask=torch.tensor([True, False, True])),
        torch.tensor([0, 2]),
        torch.tensor([0, 1]),
    ),
    (OneHot(3), torch.tensor([False, True, False]), torch.tensor([True, True, False])),
    (
        Binary(3),
        torch.tensor([1, 0, 1], dtype=torch.int8),
        torch.tensor([1, 2, 0], dtype=torch.int8),
    ),
]


@pytest.mark.parametrize("spec,good,bad", TENSOR_IS_IN, ids=lambda s: type(s).__name__)
def test_is_in_answers_a_0d_bool_tensor_as_torchrl(spec, good, bad):
    for value, expected in ((good, True), (bad, False)):
        found = spec.is_in(value)
        assert isinstance(found, torch.Tensor) and found.shape == () and found.dtype == torch.bool
        assert found.item() is expected
    wrong_dtype = good.to(torch.float64 if good.dtype != torch.float64 else torch.float32)
    assert spec.is_in(wrong_dtype) is False
    assert spec.is_in(good[..., :1]) is False  # wrong shape


@pytest.mark.parametrize(
    "spec", [Unbounded(shape=(2,)), MultiCategorical([2, 3]), MultiOneHot([2, 3])]
)
def test_is_in_answers_a_python_bool_for_other_leaves(spec):
    assert spec.is_in(spec.rand()) is True


def test_non_tensor_is_in_takes_raw_values_as_torchrl():
    spec = NonTensor(shape=())
    assert spec.is_in("text") is True and spec.is_in(3) is True and spec.is_in(None) is True
    assert spec.is_in(NonTensorData("a")) is True
    assert spec.is_in(torch.ones(2)) is False
