"""Tests of Composite and make_composite_from_td."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

from tdrl.errors import SpecError
from tdrl.specs import (
    Bounded,
    Categorical,
    Composite,
    NonTensor,
    OneHot,
    Unbounded,
    make_composite_from_td,
)

BATCHES = [(), (2, 3)]
KEYS = ["action", ("agents", "obs")]


def make_spec(batch: tuple[int, ...]) -> Composite:
    return Composite(
        action=Bounded(-1.0, 1.0, shape=(*batch, 2)),
        agents={"obs": Unbounded(shape=(*batch, 4)), "mask": OneHot(3, shape=(*batch, 3))},
        done=Categorical(2, shape=(*batch, 1), dtype=torch.bool),
        shape=batch,
    )


@pytest.mark.parametrize("batch", BATCHES)
class TestCompositeBatch:
    def test_rand_zero_one_build_tensordicts(self, batch):
        spec = make_spec(batch)
        for method in ("rand", "zero", "one"):
            td = getattr(spec, method)((5,))
            assert isinstance(td, TensorDict)
            assert td.batch_size == (5, *batch)
            assert isinstance(td.get("agents"), TensorDict)
            assert td["agents", "obs"].shape == (5, *batch, 4)
        assert spec.is_in(spec.rand())
        assert spec.is_in(spec.rand((2,)))

    def test_is_in_rejects_missing_and_bad_values(self, batch):
        spec = make_spec(batch)
        td = spec.rand()
        td.set("extra", torch.zeros(batch))
        assert spec.is_in(td)  # extra keys are ignored
        bad = td.clone()
        bad.set("action", bad["action"] + 5)
        assert not spec.is_in(bad)
        missing = td.exclude(("agents", "obs"))
        assert not spec.is_in(missing)
        with pytest.raises(SpecError, match=r"key \('agents', 'obs'\) is missing"):
            spec.assert_is_in(missing)
        with pytest.raises(SpecError, match="value for key 'action' is out of bounds"):
            spec.assert_is_in(bad)

    def test_check_shape_dtype_names_nested_key(self, batch):
        spec = make_spec(batch)
        td = spec.zero()
        spec.check_shape_dtype(td)
        td.set(("agents", "obs"), td["agents", "obs"].double())
        with pytest.raises(SpecError, match=r"key \('agents', 'obs'\) has the wrong dtype"):
            spec.check_shape_dtype(td)

    def test_project_returns_new_td_in_domain(self, batch):
        spec = make_spec(batch)
        td = spec.rand()
        td.set("action", td["action"] * 10)
        td.set(("agents", "mask"), torch.ones(*batch, 3, dtype=torch.bool))
        before = td.clone()
        out = spec.project(td)
        assert spec.is_in(out)
        assert (td == before).all()  # input untouched
        assert out is not td

    def test_batch_ops(self, batch):
        spec = make_spec(batch)
        expanded = spec.expand(4, *batch)
        assert expanded.shape == (4, *batch)
        assert expanded["agents", "obs"].shape == (4, *batch, 4)
        assert expanded.rand().batch_size == (4, *batch)
        assert expanded[0] == spec
        assert expanded[1:3]["action"].shape == (2, *batch, 2)
        unsq = spec.unsqueeze(0)
        assert unsq["done"].shape == (1, *batch, 1)
        assert unsq.squeeze(0) == spec
        assert unsq.is_in(unsq.rand())

    def test_clone_to_eq(self, batch):
        spec = make_spec(batch)
        clone = spec.clone()
        assert clone == spec
        clone["agents", "obs"] = Unbounded(shape=(*batch, 5))
        assert clone != spec and spec["agents", "obs"].shape == (*batch, 4)
        assert spec.to("cpu") == spec.to(torch.device("cpu"))
        assert spec.to("cpu").device == torch.device("cpu")
        double = spec.to(torch.float64)
        assert double["action"].dtype == torch.float64 and spec["action"].dtype == torch.float32


def test_nested_set_get_keys_delete():
    spec = Composite(shape=(2,))
    spec["a", "b", "c"] = Unbounded(shape=(2, 3))
    spec["x"] = Categorical(4, shape=(2,))
    assert isinstance(spec["a"], Composite) and spec["a", "b"].shape == (2,)
    assert spec["a", "b", "c"] is spec[("a", "b", "c")] is spec["a"]["b"]["c"]
    assert spec[("x",)] is spec["x"]
    assert ("a", "b", "c") in spec and ("a", "z") not in spec and "x" in spec
    assert len(spec) == 2
    assert spec.keys() == ["a", "x"]
    assert spec.keys(include_nested=True) == ["a", ("a", "b"), ("a", "b", "c"), "x"]
    assert spec.keys(include_nested=True, leaves_only=True) == [("a", "b", "c"), "x"]
    assert spec.keys(leaves_only=True) == ["x"]
    assert [k for k, _ in spec.items(True, True)] == spec.keys(True, True)
    assert len(spec.values(True)) == 4
    del spec["a", "b", "c"]
    assert spec.keys(True) == ["a", ("a", "b"), "x"]
    assert spec.pop("x").n == 4 and spec.pop("x", None) is None
    assert spec.get("nope", 3) == 3


def test_shape_mismatch_names_key_and_shapes():
    spec = Composite(shape=(4,))
    with pytest.raises(ValueError, match=r"key \('a', 'b'\).*got \(3, 2\); expected \(4, \.\.\.\)"):
        spec["a", "b"] = Unbounded(shape=(3, 2))
    with pytest.raises(ValueError, match=r"key 'obs'.*got \(1,\); expected \(4, \.\.\.\)"):
        Composite(obs=Unbounded(), shape=(4,))


def test_missing_key_lists_available_keys():
    spec = Composite(action=Unbounded(), agents={"obs": Unbounded()})
    expected = (
        "Composite.__getitem__: key ('agents', 'foo') not found"
        " (available keys: ['action', ('agents', 'obs')])."
    )
    with pytest.raises(KeyError) as info:
        spec["agents", "foo"]
    assert expected in str(info.value)
    with pytest.raises(KeyError, match="available keys"):
        del spec["zzz"]
    with pytest.raises(KeyError, match="available keys"):
        spec.get(("action", "deeper"))


def test_lock_refuses_set_and_delete_recursively():
    spec = Composite(a={"b": Unbounded()})
    spec.lock_()
    assert spec.is_locked and spec["a"].is_locked
    with pytest.raises(RuntimeError, match="cannot set key 'c'"):
        spec["c"] = Unbounded()
    with pytest.raises(RuntimeError, match=r"cannot set key \('a', 'z'\)"):
        spec["a", "z"] = Unbounded()
    with pytest.raises(RuntimeError, match=r"cannot delete key \('a', 'b'\)"):
        del spec["a", "b"]
    spec.unlock_()
    spec["c"] = Unbounded()
    assert "c" in spec and not spec["a"].is_locked


def test_select_exclude_update_empty():
    spec = make_spec((2,))
    selected = spec.select("action", ("agents", "obs"))
    assert selected.keys(True, True) == ["action", ("agents", "obs")]
    assert selected["agents"].shape == (2,)
    excluded = spec.exclude(("agents", "obs"), "done", "not-there")
    assert excluded.keys(True, True) == ["action", ("agents", "mask")]
    assert spec.keys(True, True) == ["action", ("agents", "obs"), ("agents", "mask"), "done"]
    spec.update({"agents": {"extra": Unbounded(shape=(2,))}, "reward": Unbounded(shape=(2, 1))})
    assert ("agents", "obs") in spec and ("agents", "extra") in spec and "reward" in spec
    empty = spec.empty()
    assert len(empty) == 0 and empty.shape == spec.shape
    with pytest.raises(KeyError, match="available keys"):
        spec.select("nope")


def test_flatten_unflatten_keys():
    spec = make_spec(())
    flat = spec.flatten_keys()
    assert flat.keys() == ["action", "agents.obs", "agents.mask", "done"]
    assert flat.unflatten_keys() == spec


def test_equality_depends_on_content():
    a = Composite(x=Bounded(0.0, 1.0))
    assert a == Composite(x=Bounded(0.0, 1.0))
    assert a != Composite(x=Bounded(0.0, 2.0))
    assert a != Composite(y=Bounded(0.0, 1.0))
    assert Composite(shape=(1,)) != Composite(shape=(2,))


def test_encode_from_numpy_nested():
    spec = Composite(obs=Unbounded(shape=(3,)), nested={"n": Categorical(4)})
    td = spec.encode({"obs": np.arange(3), "nested": {"n": np.int64(2)}})
    assert td["obs"].dtype == torch.float32 and td["obs"].tolist() == [0.0, 1.0, 2.0]
    assert td["nested", "n"].item() == 2
    assert spec.is_in(td)
    with pytest.raises(KeyError, match="available keys"):
        spec.encode({"bad": 1})


def test_device_moves_children_and_repr():
    spec = Composite(a=Unbounded(), nested={"b": NonTensor(example_data="s")}, device="cpu")
    assert spec["nested", "b"].device == torch.device("cpu")
    text = repr(spec)
    assert text.startswith("Composite(\n    a: Unbounded(")
    assert "\n    nested: Composite(\n        b: NonTensor(" in text
    td = spec.rand()
    assert td.device == torch.device("cpu") and td["nested", "b"] == "s"


def test_index_and_squeeze_errors():
    spec = make_spec((2, 3))
    assert spec[..., 0].shape == (2,)
    assert spec[..., 0]["action"].shape == (2, 2)
    assert spec[0, 1]["agents", "obs"].shape == (4,)
    with pytest.raises(IndexError, match="Index the batch dims only"):
        spec[0, 0, 0]
    with pytest.raises(ValueError, match="trailing dims must match"):
        spec.expand(4, 3)
    assert spec.squeeze() == spec


def test_make_composite_from_td():
    td = TensorDict(
        obs=torch.zeros(4, 3),
        count=torch.zeros(4, dtype=torch.int64),
        nested=TensorDict(x=torch.ones(4, 2, 5), batch_size=[4, 2]),
        text=NonTensorData("hi", batch_size=[4]),
        batch_size=[4],
    )
    spec = make_composite_from_td(td)
    assert isinstance(spec, Composite) and spec.shape == (4,)
    assert spec["count"].dtype == torch.int64
    assert spec["nested"].shape == (4, 2) and spec["nested", "x"].shape == (4, 2, 5)
    assert isinstance(spec["text"], NonTensor)
    assert spec.is_in(td) and spec.is_in(spec.rand())
