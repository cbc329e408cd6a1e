"""Every storage x ndim: lengths, capacity, ``rb[:]``, wrap-around, sampled indices."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..registry import capture, scenario


def _data(shape: tuple[int, ...], start: int = 0) -> TensorDict:
    n = int(torch.Size(shape).numel())
    obs = torch.arange(start, start + n, dtype=torch.float32).reshape(*shape)
    return TensorDict(
        {"obs": obs, "nested": {"flag": obs.long() % 2 == 0}},
        batch_size=shape,
    )


def _index_summary(index: Any, length: int) -> Any:
    """Shape/dtype of a sampled index and whether it lies in the storage (not its random values)."""
    if isinstance(index, tuple):
        return {"tuple": [_index_summary(i, length) for i in index]}
    index = torch.as_tensor(index)
    return {
        "shape": list(index.shape),
        "dtype": str(index.dtype),
        "in_range": bool(((index >= 0) & (index < max(length, 1))).all()),
    }


def _storage(lib: Any, kind: str, capacity: int, ndim: int) -> Any:
    data = lib.data
    if kind == "LazyTensorStorage":
        return data.LazyTensorStorage(capacity, ndim=ndim)
    if kind == "LazyMemmapStorage":
        return data.LazyMemmapStorage(capacity, ndim=ndim)
    shape = (capacity,) if ndim == 1 else (2, capacity // 2)
    return data.TensorStorage(_data(shape).zero_(), ndim=ndim)


def _tensor_storage_scenario(lib: Any, kind: str, ndim: int) -> Any:
    capacity = 8
    rb = lib.data.TensorDictReplayBuffer(storage=_storage(lib, kind, capacity, ndim), batch_size=3)
    shape = (5,) if ndim == 1 else (2, 3)
    out: dict[str, Any] = {}
    out["extend_index"] = capture(lambda: rb.extend(_data(shape)))
    out["len_1"] = len(rb)
    out["storage_len_1"] = len(rb.storage)
    out["max_size"] = capture(lambda: rb.storage.max_size)
    out["all_1"] = capture(lambda: rb[:].clone())  # TorchRL's rb[:] is a view of the storage
    out["extend_2"] = capture(lambda: rb.extend(_data(shape, start=100)))  # wraps around
    out["len_2"] = len(rb)
    out["all_2"] = capture(lambda: rb[:].clone())
    out["sample"] = capture(lambda: _sample_summary(rb))
    return out


def _sample_summary(rb: Any) -> Any:
    sample = rb.sample()
    return {
        "shape": list(sample.shape),
        "keys": sorted(map(str, sample.keys(True, True))),
        "index": _index_summary(sample.get("index"), len(rb.storage)),
        "in_buffer": bool(torch.isin(sample["obs"], rb[:]["obs"]).all()),
    }


for _kind in ("LazyTensorStorage", "LazyMemmapStorage", "TensorStorage"):
    for _ndim in (1, 2):

        def _make(kind: str = _kind, ndim: int = _ndim) -> None:
            @scenario(f"storages/{kind}/ndim={ndim}")
            def _(lib: Any) -> Any:
                return _tensor_storage_scenario(lib, kind, ndim)

        _make()


@scenario("storages/ListStorage/ndim=1")
def _(lib: Any) -> Any:
    rb = lib.data.ReplayBuffer(storage=lib.data.ListStorage(4), batch_size=3)
    out: dict[str, Any] = {}
    out["extend_index"] = rb.extend([10, 11, 12])
    out["len_1"] = len(rb)
    out["all_1"] = capture(lambda: rb[:])
    out["extend_2"] = capture(lambda: rb.extend([13, 14]))
    out["len_2"] = len(rb)
    out["all_2"] = capture(lambda: rb[:])
    out["item_0"] = capture(lambda: rb[0])
    out["sample"] = capture(lambda: _list_sample(rb))
    return out


def _list_sample(rb: Any) -> Any:
    sample, info = rb.sample(return_info=True)
    return {
        "type": type(sample).__name__,
        "len": len(sample),
        "in_buffer": all(int(s) in (11, 12, 13, 14) for s in sample),
        "info_keys": sorted(info),
    }


@scenario("storages/ListStorage/tensordict")
def _(lib: Any) -> Any:
    rb = lib.data.ReplayBuffer(storage=lib.data.ListStorage(6), batch_size=2)
    out = {"extend": capture(lambda: rb.extend(_data((4,))))}
    out["len"] = len(rb)
    out["all"] = capture(lambda: rb[:])
    out["sample"] = capture(lambda: _td_sample(rb))
    return out


def _td_sample(rb: Any) -> Any:
    sample = rb.sample()
    return {"type": type(sample).__name__, "shape": list(sample.shape)}


@scenario("storages/LazyTensorStorage/add")
def _(lib: Any) -> Any:
    rb = lib.data.ReplayBuffer(storage=lib.data.LazyTensorStorage(3))
    indices = [rb.add(_data((), start=i)) for i in range(4)]
    return {"indices": indices, "len": len(rb), "all": rb[:]}


@scenario("storages/LazyTensorStorage/ndim=2/extend_mismatch")
def _(lib: Any) -> Any:
    """Data of another second dim than the first extend fixed."""
    rb = lib.data.ReplayBuffer(storage=lib.data.LazyTensorStorage(8, ndim=2))
    rb.extend(_data((2, 3)))
    return capture(lambda: rb.extend(_data((2, 4))))


@scenario("storages/ReplayBuffer/empty")
def _(lib: Any) -> Any:
    rb = lib.data.ReplayBuffer(storage=lib.data.LazyTensorStorage(4), batch_size=2)
    return {"len": len(rb), "sample": capture(rb.sample)}
