"""Spec behaviour that does not depend on random draws."""

from __future__ import annotations

from typing import Any

import torch

from ..registry import capture, scenario


@scenario("specs/Bounded/basics")
def _(lib: Any) -> Any:
    spec = lib.data.Bounded(low=-1.0, high=2.0, shape=(2, 3))
    x = torch.tensor([[-2.0, 0.0, 3.0], [1.0, 2.0, -1.0]])
    return {
        "zero": spec.zero(),
        "one": capture(spec.one),
        "project": spec.project(x),
        "is_in": spec.is_in(x),
        "is_in_projected": spec.is_in(spec.project(x)),
        "expand": spec.expand(4, 2, 3),
        "rand_shape": list(spec.rand((5,)).shape),
        "squeeze": capture(lambda: lib.data.Bounded(-1.0, 1.0, shape=(1, 3)).squeeze()),
        "unsqueeze": spec.unsqueeze(0),
        "dtype_int": lib.data.Bounded(low=0, high=5, shape=(2,), dtype=torch.int64),
    }


@scenario("specs/Categorical/basics")
def _(lib: Any) -> Any:
    spec = lib.data.Categorical(4, shape=(2,))
    x = torch.tensor([1, 3])
    return {
        "zero": spec.zero(),
        "is_in": spec.is_in(x),
        "is_in_bad": spec.is_in(torch.tensor([1, 4])),
        "to_one_hot": spec.to_one_hot(x),
        "to_one_hot_spec": spec.to_one_hot_spec(),
        "project": capture(lambda: spec.project(torch.tensor([-1, 7]))),
        "default": lib.data.Categorical(3),
    }


@scenario("specs/OneHot/basics")
def _(lib: Any) -> Any:
    spec = lib.data.OneHot(4)
    x = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1]])
    return {
        "zero": spec.zero(),
        "dtype": spec.dtype,
        "is_in_batch": spec.is_in(x),
        "is_in_bool": spec.is_in(x.bool()),
        "to_categorical": spec.to_categorical(x),
        "to_categorical_spec": spec.to_categorical_spec(),
        "encode": capture(lambda: spec.encode(torch.tensor([0, 0, 1, 0]))),
        "project": capture(lambda: spec.project(torch.tensor([0.1, 0.7, 0.2, 0.0]))),
    }


@scenario("specs/Unbounded/basics")
def _(lib: Any) -> Any:
    return {
        "default": lib.data.Unbounded(),
        "shape": lib.data.Unbounded(shape=(3,)),
        "int": lib.data.Unbounded(shape=(2,), dtype=torch.int64),
        "zero": lib.data.Unbounded(shape=(3,)).zero(),
        "is_in": lib.data.Unbounded(shape=(3,)).is_in(torch.tensor([1e30, -1e30, 0.0])),
    }


@scenario("specs/Composite/basics")
def _(lib: Any) -> Any:
    c = lib.data.Composite(
        obs=lib.data.Unbounded(shape=(2, 3)),
        nested=lib.data.Composite(a=lib.data.Categorical(3, shape=(2,)), shape=(2,)),
        shape=(2,),
    )
    return {
        "spec": c,
        "keys": sorted(map(str, c.keys(True, True))),
        "zero": c.zero(),
        "expand": c.expand(4, 2),
        "is_in": c.is_in(c.zero()),
        "getitem_nested": c["nested", "a"],
        "index": capture(lambda: c[0]),
        "empty": lib.data.Composite(),
    }


@scenario("specs/MultiCategorical/basics")
def _(lib: Any) -> Any:
    spec = lib.data.MultiCategorical([2, 3])
    return {"spec": spec, "zero": spec.zero(), "is_in": spec.is_in(torch.tensor([1, 2]))}


@scenario("specs/Binary/basics")
def _(lib: Any) -> Any:
    spec = lib.data.Binary(n=3)
    return {"spec": spec, "zero": spec.zero(), "is_in": spec.is_in(torch.tensor([1, 0, 1]))}
