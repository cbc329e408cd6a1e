"""Tests of the leaf specs: Unbounded, Bounded, Categorical, OneHot, Binary, Multi*, NonTensor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import NonTensorData

from tdrl.errors import SpecError
from tdrl.specs import (
    Binary,
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    TensorSpec,
    Unbounded,
)

BATCHES = [(), (2, 3)]


def make_leaves(batch: tuple[int, ...]) -> dict[str, TensorSpec]:
    """One spec of every leaf kind with batch dims ``batch``."""
    return {
        "unbounded": Unbounded(shape=(*batch, 3)),
        "unbounded_int": Unbounded(shape=(*batch, 3), dtype=torch.int32),
        "bounded": Bounded(-1.0, 2.0, shape=(*batch, 3)),
        "bounded_int": Bounded(-2, 3, shape=(*batch, 2), dtype=torch.int64),
        "categorical": Categorical(5, shape=(*batch, 2)),
        "categorical_bool": Categorical(2, shape=(*batch, 1), dtype=torch.bool),
        "onehot": OneHot(4, shape=(*batch, 4)),
        "binary": Binary(3, shape=(*batch, 3)),
        "multicat": MultiCategorical([3, 2, 4], shape=(*batch, 3)),
        "multionehot": MultiOneHot([3, 2], shape=(*batch, 5)),
    }


LEAF_NAMES = list(make_leaves(()))


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", LEAF_NAMES)
class TestEveryLeaf:
    def test_rand_is_in_with_shape_dtype_device(self, batch, name):
        spec = make_leaves(batch)[name]
        for extra in [(), (4,)]:
            x = spec.rand(extra)
            assert x.shape == (*extra, *spec.shape)
            assert x.dtype == spec.dtype
            assert x.device == spec.device
            assert spec.is_in(x)

    def test_zero_one_shapes(self, batch, name):
        spec = make_leaves(batch)[name]
        assert spec.zero().shape == spec.shape
        assert spec.one((2,)).shape == (2, *spec.shape)
        assert spec.zero().dtype == spec.dtype

    def test_project_lands_in_domain(self, batch, name):
        spec = make_leaves(batch)[name]
        torch.manual_seed(0)
        garbage = torch.randn(4, *spec.shape) * 10
        projected = spec.project(garbage)
        assert projected.shape == garbage.shape
        assert spec.is_in(projected)

    def test_wrong_shape_and_dtype_are_not_in(self, batch, name):
        spec = make_leaves(batch)[name]
        x = spec.rand()
        assert not spec.is_in(x[..., :1] if spec.shape[-1] > 1 else x.expand(*x.shape[:-1], 2))
        other = torch.float64 if spec.dtype != torch.float64 else torch.float32
        assert not spec.is_in(x.to(other))
        with pytest.raises(SpecError, match="wrong dtype"):
            spec.check_shape_dtype(x.to(other), key="k")

    def test_batch_shape_ops(self, batch, name):
        spec = make_leaves(batch)[name]
        expanded = spec.expand(5, *spec.shape)
        assert expanded.shape == (5, *spec.shape)
        assert expanded.is_in(expanded.rand())
        assert spec.expand((5, *spec.shape)) == expanded
        assert expanded[0] == spec
        assert expanded[1:3].shape == (2, *spec.shape)
        unsq = spec.unsqueeze(0)
        assert unsq.shape == (1, *spec.shape)
        assert unsq.squeeze(0) == spec
        assert unsq.squeeze().shape == torch.Size(
            [s for i, s in enumerate(unsq.shape) if s != 1 or i >= unsq._index_ndim]
        )
        assert unsq.is_in(unsq.rand())

    def test_clone_eq_to(self, batch, name):
        spec = make_leaves(batch)[name]
        clone = spec.clone()
        assert clone == spec and clone is not spec
        assert spec.to("cpu") == spec
        assert spec != spec.expand(2, *spec.shape)

    def test_encode_numpy(self, batch, name):
        spec = make_leaves(batch)[name]
        value = spec.rand()
        if name in ("onehot", "multionehot"):
            # TorchRL: one-hot specs encode categorical indices (what to_numpy gives back)
            encoded = spec.encode(spec.to_categorical(value).numpy())
            assert encoded.dtype == spec.dtype and torch.equal(encoded, value)
            return
        encoded = spec.encode(
            value.numpy().astype(np.float64) if name != "binary" else value.numpy()
        )
        assert encoded.dtype == spec.dtype
        assert torch.equal(encoded, value)
        flat = spec.encode(value.reshape(-1).numpy())
        assert flat.shape == spec.shape


def test_expand_rejects_wrong_trailing_dims():
    spec = Bounded(0.0, 1.0, shape=(3,))
    with pytest.raises(ValueError, match=r"got \(2, 4\); expected \(\.\.\., 3\)"):
        spec.expand(2, 4)
    assert Unbounded(shape=(1, 3)).expand(4, 3).shape == (4, 3)


def test_event_dims_cannot_be_indexed_or_squeezed():
    spec = OneHot(3, shape=(2, 3))
    assert spec[0].shape == (3,)
    with pytest.raises(IndexError, match="Index the batch dims only"):
        spec[0, 1]
    with pytest.raises(ValueError, match="event dim"):
        OneHot(1).squeeze(0)


def test_bounded_attributes_follow_shape_ops():
    low = torch.arange(3.0)
    spec = Bounded(low, low + 1)
    assert spec.shape == (3,)
    assert torch.equal(spec.expand(2, 3).low, low.expand(2, 3))
    assert spec[1].low.item() == 1.0 and spec[1].high.item() == 2.0
    assert spec.unsqueeze(0).high.shape == (1, 3)


def test_bounded_repr_and_errors():
    spec = Bounded(-1.0, 1.0, shape=(3,))
    assert repr(spec) == (
        "Bounded(shape=torch.Size([3]), low=-1.0, high=1.0, dtype=torch.float32, device=cpu)"
    )
    with pytest.raises(ValueError, match="low is above high"):
        Bounded(1.0, 0.0)
    with pytest.raises(ValueError, match=r"got low \(2,\), high \(\); expected shapes"):
        Bounded(torch.zeros(2), 1.0, shape=(3,))


def test_bounded_assert_is_in_message():
    spec = Bounded(-2.0, 2.0, shape=(2,))
    with pytest.raises(SpecError) as info:
        spec.assert_is_in(torch.tensor([-3.2, 1.0]), key="action")
    msg = str(info.value)
    assert msg.startswith("Bounded.assert_is_in: value for key 'action' is out of bounds")
    assert "min -3.2" in msg and "max 1.0" in msg and "expected within [-2.0, 2.0]" in msg
    spec.assert_is_in(torch.tensor([-2.0, 2.0]))


def test_check_shape_dtype_names_key_and_shapes():
    spec = Unbounded(shape=(3,))
    with pytest.raises(SpecError, match=r"key 'obs' has the wrong shape \(got \(4, 2\); expected"):
        spec.check_shape_dtype(torch.zeros(4, 2), key="obs")
    with pytest.raises(SpecError, match="not a tensor"):
        spec.check_shape_dtype([1.0, 2.0, 3.0])
    spec.check_shape_dtype(torch.zeros(7, 3))


def test_bounded_int_rand_covers_both_ends():
    spec = Bounded(-2, 3, shape=(10_000,), dtype=torch.int64)
    values = spec.rand().unique().tolist()
    assert values == [-2, -1, 0, 1, 2, 3]


def test_bounded_infinite_bound_rand_is_finite():
    spec = Bounded(torch.tensor([0.0, -float("inf")]), torch.tensor([float("inf"), 1.0]))
    x = spec.rand((1000,))
    assert torch.isfinite(x).all() and spec.is_in(x)


def test_bounded_project_clamps():
    spec = Bounded(torch.tensor([0.0, -1.0]), torch.tensor([1.0, 0.0]))
    assert spec.project(torch.tensor([[5.0, 5.0], [-5.0, -0.5]])).tolist() == [
        [1.0, 0.0],
        [0.0, -0.5],
    ]


def test_unbounded_is_in_any_value_but_checks_dtype():
    spec = Unbounded(shape=(2,), dtype=torch.int64)
    assert spec.is_in(torch.tensor([10**12, -5]))
    assert not spec.is_in(torch.tensor([1.0, 2.0]))
    assert Unbounded(dtype=torch.bool).rand((100,)).dtype == torch.bool


def test_categorical_bool_done_leaf():
    spec = Categorical(2, shape=(4, 1), dtype=torch.bool)
    assert not spec.zero().any()
    draws = spec.rand((500,))
    assert draws.dtype == torch.bool and draws.any() and not draws.all()
    with pytest.raises(ValueError, match="needs n == 2"):
        Categorical(3, dtype=torch.bool)


def test_categorical_domain():
    spec = Categorical(3, shape=(2,))
    assert spec.is_in(torch.tensor([0, 2]))
    assert not spec.is_in(torch.tensor([0, 3]))
    assert not spec.is_in(torch.tensor([-1, 0]))
    assert spec.cardinality() == 3
    with pytest.raises(SpecError, match=r"out of range \(got min 0, max 3; expected integers"):
        spec.assert_is_in(torch.tensor([0, 3]))


@pytest.mark.parametrize("batch", BATCHES)
def test_categorical_per_batch_mask_over_many_draws(batch):
    n = 5
    spec = Categorical(n, shape=batch)
    torch.manual_seed(0)
    mask = torch.rand(*batch, n) > 0.5
    mask[..., 2] = True  # at least one allowed value per row
    spec.update_mask(mask)
    draws = spec.rand((10_000,))
    hit = torch.nn.functional.one_hot(draws, n).bool()
    assert not (hit & ~mask).any()
    assert torch.equal(hit.any(0), mask)  # every allowed value is reached
    assert spec.is_in(draws)
    banned = (~mask).float().argmax(-1)
    rows_with_ban = (~mask).any(-1)
    if rows_with_ban.any():
        assert not spec.is_in(torch.where(rows_with_ban, banned, spec.rand()))
    assert spec.is_in(spec.project(torch.randint(-3, 9, (7, *batch))))


def test_categorical_mask_validation_and_clear():
    spec = Categorical(4, shape=(3,))
    with pytest.raises(
        ValueError, match=r"got \(2, 4\); expected a shape broadcastable to \(3, 4\)"
    ):
        spec.update_mask(torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        spec.update_mask(torch.ones(3, 4))
    spec.update_mask(torch.tensor([True, False, False, False]))
    assert spec.mask is not None and spec.mask.shape == (3, 4)
    assert (spec.rand((100,)) == 0).all()
    spec.update_mask(None)
    assert spec.mask is None and spec.is_in(torch.tensor([3, 3, 3]))


def test_categorical_all_masked_row_raises():
    spec = Categorical(3, shape=(2,), mask=torch.tensor([[True, False, False], [False] * 3]))
    with pytest.raises(ValueError, match="allows no value"):
        spec.rand()


def test_categorical_masked_project_picks_closest_allowed():
    spec = Categorical(5, mask=torch.tensor([False, True, False, False, True]))
    assert spec.project(torch.tensor([0, 1, 2, 3, 4, 9])).tolist() == [1, 1, 1, 4, 4, 4]
    assert spec.project(torch.tensor([2.6])).tolist() == [4]


def test_masks_follow_shape_ops_and_clone_is_independent():
    spec = Categorical(
        3, shape=(2,), mask=torch.tensor([[True, False, False], [False, True, True]])
    )
    assert spec[1].mask.tolist() == [False, True, True]
    assert spec.expand(4, 2).mask.shape == (4, 2, 3)
    clone = spec.clone()
    clone.update_mask(None)
    assert spec.mask is not None and clone != spec
    other = spec.clone()
    other.mask[0, 1] = True
    assert spec.mask[0, 1].item() is False


def test_onehot():
    spec = OneHot(4, shape=(2, 4), mask=torch.tensor([[True, False, True, False]] * 2))
    draws = spec.rand((5000,))
    assert not (draws & ~spec.mask).any()
    assert draws.sum(-1).eq(1).all()
    assert not spec.is_in(torch.tensor([[True, True, False, False]] * 2))
    assert not spec.is_in(torch.tensor([[False, True, False, False]] * 2))
    with pytest.raises(SpecError, match="masked"):
        spec.assert_is_in(torch.tensor([[False, True, False, False]] * 2), key="a")
    idx = spec.to_categorical(draws)
    assert torch.equal(spec.to_categorical_spec().to_one_hot(idx), draws)
    projected = spec.project(torch.tensor([[0.1, 5.0, 0.2, 0.0]] * 2))
    assert projected[0].tolist() == [False, False, True, False]
    with pytest.raises(ValueError, match=r"got shape \(3,\), n=4"):
        OneHot(4, shape=(3,))


def test_categorical_to_one_hot_spec():
    spec = Categorical(3, shape=(2,))
    one_hot = spec.to_one_hot_spec()
    assert isinstance(one_hot, OneHot) and one_hot.shape == (2, 3)
    assert one_hot.is_in(spec.to_one_hot(spec.rand()))


def test_binary():
    spec = Binary(shape=(2, 3), dtype=torch.int8)
    assert spec.n == 3 and spec.cardinality() == 8
    assert spec.is_in(torch.tensor([[0, 1, 1], [1, 1, 0]], dtype=torch.int8))
    assert not spec.is_in(torch.tensor([[0, 2, 1], [1, 1, 0]], dtype=torch.int8))
    with pytest.raises(ValueError, match="size is unknown"):
        Binary()


def test_multicategorical_mask():
    spec = MultiCategorical([3, 2], shape=(4, 2))
    mask = torch.zeros(4, 5, dtype=torch.bool)
    mask[:, [0, 2]] = True  # sub-action 0 in {0, 2}
    mask[:2, 3] = True  # sub-action 1: rows 0-1 allow 0, rows 2-3 allow 1
    mask[2:, 4] = True
    spec.update_mask(mask)
    draws = spec.rand((5000,))
    assert set(draws[..., 0].unique().tolist()) == {0, 2}
    assert (draws[:, :2, 1] == 0).all() and (draws[:, 2:, 1] == 1).all()
    assert spec.is_in(draws)
    assert not spec.is_in(torch.tensor([[1, 0]] * 4))
    assert spec.project(torch.tensor([[1, 1]] * 4)).tolist() == [[0, 0]] * 2 + [[0, 1]] * 2
    with pytest.raises(ValueError, match=r"broadcastable to \(4, 5\)"):
        spec.update_mask(torch.ones(4, 2, dtype=torch.bool))
    assert spec.cardinality() == 6


def test_multicategorical_range_and_one_hot():
    spec = MultiCategorical([3, 2])
    assert not spec.is_in(torch.tensor([0, 2]))
    assert spec.to_one_hot(torch.tensor([2, 1])).tolist() == [False, False, True, False, True]
    assert spec.to_one_hot_spec().is_in(spec.to_one_hot(spec.rand((10,))))


def test_multionehot_mask_and_conversion():
    mask = torch.tensor([False, True, True, True, False])
    spec = MultiOneHot([3, 2], mask=mask)
    draws = spec.rand((3000,))
    assert not (draws & ~mask).any()
    cat = spec.to_categorical(draws)
    assert set(cat[:, 0].tolist()) == {1, 2} and (cat[:, 1] == 0).all()
    assert torch.equal(spec.to_categorical_spec().to_one_hot(cat), draws)
    assert not spec.is_in(torch.tensor([True, True, False, True, False]))
    assert spec.project(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])).tolist() == [
        False,
        True,
        False,
        True,
        False,
    ]


def test_encode_variants():
    spec = Bounded(0.0, 1.0, shape=(2, 2))
    assert spec.encode(np.array([0.1, 0.2, 0.3, 0.4])).shape == (2, 2)
    assert spec.encode([[0.0, 1.0], [1.0, 0.0]]).dtype == torch.float32
    assert Categorical(3).encode(2).item() == 2
    with pytest.raises(SpecError, match=r"got shape \(3,\); expected trailing dims \(2, 2\)"):
        spec.encode(np.zeros(3))


def test_to_dtype():
    spec = Bounded(0, 5, shape=(2,), dtype=torch.int64).to(torch.float32)
    assert spec.dtype == torch.float32 and spec.low.dtype == torch.float32
    assert spec.is_in(torch.tensor([0.5, 4.5]))


def test_non_tensor():
    spec = NonTensor(shape=(2,), example_data="hi")
    value = spec.rand((3,))
    assert isinstance(value, NonTensorData)
    assert value.batch_size == (3, 2) and value.data == "hi"
    assert spec.is_in(value) and not spec.is_in(torch.zeros(2))
    assert spec.unsqueeze(0).shape == (1, 2)
    with pytest.raises(SpecError, match="not non-tensor data"):
        spec.assert_is_in(torch.zeros(2), key="text")


def test_bounded_builds_on_the_meta_device():
    # a spec moved to "meta" (env.to("meta")) holds no values: no bound check to run
    spec = Bounded(0, torch.iinfo(torch.int64).max, shape=(2,), dtype=torch.int64, device="meta")
    assert spec.device == torch.device("meta") and spec.low.is_meta
    assert Bounded(-1.0, 1.0, shape=(2,)).to("meta").high.is_meta
