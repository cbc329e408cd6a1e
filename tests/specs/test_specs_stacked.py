"""Tests of stack_specs / torch.stack on specs and StackedComposite."""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from tdrl.errors import SpecError
from tdrl.specs import (
    Bounded,
    Categorical,
    Composite,
    Stacked,
    StackedComposite,
    Unbounded,
    make_composite_from_td,
    stack_specs,
)

BATCHES = [(), (2, 3)]


def agent(batch: tuple[int, ...], obs_dim: int, extra: bool = False) -> Composite:
    spec = Composite(
        obs=Unbounded(shape=(*batch, obs_dim)),
        action=Bounded(-1.0, 1.0, shape=(*batch, 2)),
        shape=batch,
    )
    if extra:
        spec["only_here"] = Unbounded(shape=batch)
    return spec


def test_equal_leaves_stack_bounds_and_masks():
    a = Bounded(0.0, 1.0, shape=(3,))
    b = Bounded(-1.0, 2.0, shape=(3,))
    stacked = torch.stack([a, b], 0)
    assert isinstance(stacked, Bounded) and stacked.shape == (2, 3)
    assert stacked.low[:, 0].tolist() == [0.0, -1.0] and stacked.high[:, 0].tolist() == [1.0, 2.0]
    assert stacked[1] == b
    assert torch.stack([a, b], dim=1).shape == (3, 2)

    masked = Categorical(3, mask=torch.tensor([True, False, False]))
    both = stack_specs([masked, Categorical(3)])
    assert both.mask.tolist() == [[True, False, False], [True, True, True]]
    draws = both.rand((1000,))
    assert (draws[:, 0] == 0).all() and draws[:, 1].unique().numel() == 3


def test_leaves_of_different_shapes_or_n_give_stacked_like_torchrl():
    ragged = torch.stack([Unbounded(shape=(3,)), Unbounded(shape=(4,))], 0)
    assert isinstance(ragged, Stacked) and ragged.shape == (2, -1)
    assert isinstance(stack_specs([Categorical(3), Categorical(4)]), Stacked)


def test_leaves_of_different_classes_or_dtypes_cannot_stack():
    with pytest.raises(ValueError, match="leaves differ"):
        torch.stack([Unbounded(shape=(3,)), Categorical(3, shape=(3,))], 0)
    with pytest.raises(ValueError, match="leaves differ"):
        stack_specs([Unbounded(shape=(3,)), Unbounded(shape=(3,), dtype=torch.int64)])
    with pytest.raises(ValueError, match="leaves differ"):
        stack_specs([Unbounded(shape=(3,)), Unbounded(shape=(3, 1))])
    with pytest.raises(ValueError, match="different batch shapes"):
        stack_specs([Composite(shape=(2,)), Composite(shape=(3,))])


@pytest.mark.parametrize("batch", BATCHES)
def test_homogeneous_composites_give_composite(batch):
    a, b = agent(batch, 3), agent(batch, 3)
    b["action"] = Bounded(-2.0, 2.0, shape=(*batch, 2))
    stacked = torch.stack([a, b], 0)
    assert type(stacked) is Composite
    assert stacked.shape == (2, *batch) and stacked["obs"].shape == (2, *batch, 3)
    assert stacked["action"].high[1].max().item() == 2.0
    assert stacked[0] == a and stacked[1] == b
    assert stacked.is_in(stacked.rand())


@pytest.mark.parametrize("batch", BATCHES)
def test_heterogeneous_rand_is_lazy_stack_with_per_agent_shapes(batch):
    specs = [agent(batch, 3), agent(batch, 5, extra=True)]
    stacked = torch.stack(specs, 0)
    assert isinstance(stacked, StackedComposite)
    assert stacked.shape == (2, *batch) and len(stacked) == 2
    assert stacked.keys() == ["obs", "action"]
    assert "obs" in stacked and "only_here" not in stacked
    assert stacked[1] is specs[1]
    td = stacked.rand((4,))
    assert isinstance(td, LazyStackedTensorDict)
    assert td.batch_size == (4, 2, *batch)
    assert td[:, 0]["obs"].shape == (4, *batch, 3)
    assert td[:, 1]["obs"].shape == (4, *batch, 5)
    assert stacked.is_in(td) and stacked.is_in(stacked.zero())
    assert stacked["action"].shape == (2, *batch, 2)


def test_heterogeneous_is_in_and_assert_name_element_and_key():
    stacked = stack_specs([agent((), 3), agent((), 5)])
    td = stacked.rand()
    td[1]["action"] += 10
    assert not stacked.is_in(td)
    with pytest.raises(SpecError, match=r"element 1 of dim 0: .*key 'action' is out of bounds"):
        stacked.assert_is_in(td)
    assert stacked.is_in(stacked.project(td))
    assert not stacked.is_in(TensorDict(batch_size=[3]))
    with pytest.raises(SpecError, match="does not fit the stack"):
        stacked.check_shape_dtype(TensorDict(batch_size=[3]))
    obs = stacked["obs"]  # obs of shapes (3,) and (5,): a Stacked leaf, as TorchRL
    assert isinstance(obs, Stacked) and obs.shape == (2, -1) and obs[1].shape == (5,)


def test_stack_dim_inside_batch():
    specs = [agent((4,), 3), agent((4,), 5)]
    stacked = stack_specs(specs, dim=1)
    assert stacked.shape == (4, 2)
    td = stacked.rand()
    assert td.batch_size == (4, 2) and td[:, 1]["obs"].shape == (4, 5)
    assert stacked.is_in(td)
    first = stacked[0]
    assert isinstance(first, StackedComposite) and first.shape == (2,)
    assert stacked.expand(3, 4, 2).rand().batch_size == (3, 4, 2)
    assert stacked.unsqueeze(0).shape == (1, 4, 2)
    assert stacked.unsqueeze(2).shape == (4, 2, 1)
    assert stacked.unsqueeze(0).squeeze() == stacked


def test_stacked_clone_eq_repr_and_from_td():
    stacked = stack_specs([agent((), 3), agent((), 5)])
    clone = stacked.clone()
    assert clone == stacked and clone.specs[0] is not stacked.specs[0]
    moved = stacked.to("cpu")
    assert moved.device == torch.device("cpu") and moved.specs[1]["obs"] == stacked.specs[1]["obs"]
    text = repr(stacked)
    assert text.startswith("StackedComposite(\n    0: Composite(") and "dim=0" in text
    rebuilt = make_composite_from_td(stacked.rand())
    assert isinstance(rebuilt, StackedComposite)
    assert rebuilt[1]["obs"].shape == (5,)
    nested = Composite(agents=stacked)
    td = nested.rand((2,))
    assert td.batch_size == (2,) and td["agents"].batch_size == (2, 2)
    assert nested.is_in(td)
    assert nested["agents", "action"].shape == (2, 2)
    assert ("agents", "action") in nested and ("agents", "nope") not in nested
