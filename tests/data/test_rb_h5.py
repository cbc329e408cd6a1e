"""H5StorageCheckpointer: the storage of a checkpoint as one HDF5 file, loaded as safely as the rest
(every malformed file is a CheckpointError naming it; no pickle, no link followed)."""

from __future__ import annotations

import json
import pickle
import shutil
import sys

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    H5StorageCheckpointer,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.errors import CheckpointError
from tdrl.testing._hostile import MARKER, LoadAudit, _generic_cases, check_outcome

h5py = pytest.importorskip("h5py")

FILE = "storage/checkpoint.h5"


def _buffer(make=LazyTensorStorage, checkpointer=None, ndim=1):
    return TensorDictReplayBuffer(
        storage=make(20, ndim=ndim),
        sampler=PrioritizedSampler(24, alpha=0.7, beta=0.5),
        checkpointer=checkpointer,
        batch_size=4,
        generator=torch.Generator().manual_seed(0),
    )


def _data(shape=(12,)):
    n = torch.Size(shape).numel()
    return TensorDict(
        {
            "obs": torch.randn(*shape, 3),
            "done": (torch.arange(n) % 3 == 0).view(*shape, 1),
            "half": torch.arange(n, dtype=torch.bfloat16).view(shape),
            "next": {"r": torch.arange(n).view(shape)},
        },
        list(shape),
    )


@pytest.mark.parametrize("make", [LazyTensorStorage, LazyMemmapStorage])
@pytest.mark.parametrize("ndim", [1, 2])
def test_h5_checkpoints_round_trip(tmp_path, make, ndim):
    rb = _buffer(make, H5StorageCheckpointer(h5_kwargs={"compression": "gzip"}), ndim)
    rb.extend(_data((12,) if ndim == 1 else (3, 4)))
    rb.sample()
    rb.dumps(tmp_path / "ckpt")
    files = sorted(p.name for p in (tmp_path / "ckpt" / "storage").iterdir())
    assert files == ["checkpoint.h5", "meta.json"]  # no raw tensor files for the storage
    loaded = _buffer(make, ndim=ndim)  # loads reads either format
    loaded.loads(tmp_path / "ckpt")
    assert len(loaded) == len(rb)
    for _ in range(3):
        a, b = rb.sample(), loaded.sample()
        assert (a == b).all()
    with h5py.File(tmp_path / "ckpt" / FILE) as f:  # a plain HDF5 file other tools can read
        assert f["data/next/r"].shape[0] == (12 if ndim == 1 else 4)


def test_storage_checkpointer_attribute_and_argument_checks():
    storage = LazyTensorStorage(10)
    storage.checkpointer = H5StorageCheckpointer(checkpoint_file="data.h5")
    assert ReplayBuffer(storage=storage).storage.checkpointer.checkpoint_file == "data.h5"
    with pytest.raises(TypeError, match="unsupported checkpointer"):
        storage.checkpointer = object()
    with pytest.raises(ValueError, match="cannot be dumped"):
        ReplayBuffer(storage=ListStorage(10), checkpointer=H5StorageCheckpointer())
    with pytest.raises(ValueError, match="packing options are not supported"):
        H5StorageCheckpointer(done_keys=["done"])
    with pytest.raises(ValueError, match="invalid checkpoint_file"):
        H5StorageCheckpointer(checkpoint_file="../x.h5")


def test_a_missing_h5py_is_a_checkpoint_error(tmp_path, monkeypatch):
    rb = _buffer(checkpointer=H5StorageCheckpointer())
    rb.extend(_data())
    rb.dumps(tmp_path / "ckpt")
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(CheckpointError, match=r"pip install tdrl\[h5\]") as info:
        _buffer().loads(tmp_path / "ckpt")
    assert str(tmp_path / "ckpt") in str(info.value)


def _edit(edit):
    def mutate(root, outside):
        with h5py.File(root / FILE, "r+") as f:
            edit(f, outside)

    return mutate


def _replace_obs(**kwargs):
    def edit(f, outside):
        del f["data/obs"]
        ds = f["data"].create_dataset("obs", **kwargs)
        ds.attrs["dtype"] = "float32"

    return _edit(edit)


def _external_link(f, outside):
    with h5py.File(outside / "other.h5", "w") as other:
        other.create_dataset("obs", data=torch.zeros(12, 3).numpy()).attrs["dtype"] = "float32"
    del f["data/obs"]
    f["data/obs"] = h5py.ExternalLink(str(outside / "other.h5"), "obs")


def _external_storage(f, outside):
    (outside / "raw.bin").write_bytes(bytes(12 * 3 * 4))
    del f["data/obs"]
    ds = f["data"].create_dataset(
        "obs", shape=(12, 3), dtype="float32", external=[(str(outside / "raw.bin"), 0, 144)]
    )
    ds.attrs["dtype"] = "float32"


def _virtual(f, outside):
    with h5py.File(outside / "src.h5", "w") as src:
        src.create_dataset("x", data=torch.zeros(12, 3).numpy())
    layout = h5py.VirtualLayout(shape=(12, 3), dtype="float32")
    layout[:] = h5py.VirtualSource(str(outside / "src.h5"), "x", shape=(12, 3))
    del f["data/obs"]
    f["data"].create_virtual_dataset("obs", layout).attrs["dtype"] = "float32"


def _set_meta(key, value):
    def edit(f, outside):
        meta = json.loads(f.attrs["meta"])
        meta[key] = value
        f.attrs["meta"] = json.dumps(meta)

    return _edit(edit)


def _marker(value):
    def mutate(root, outside):
        meta = json.loads((root / "storage" / "meta.json").read_text())
        meta["entries"]["file"]["value"] = value
        (root / "storage" / "meta.json").write_text(json.dumps(meta))

    return mutate


def _bad_bool(f, outside):
    del f["data/done"]
    ds = f["data"].create_dataset("done", data=torch.full((12, 1), 2, dtype=torch.uint8).numpy())
    ds.attrs["dtype"] = "bool"


def _soft_link(f, outside):
    del f["data/obs"]
    f["data/obs"] = h5py.SoftLink("/data/half")


def _pickled(root, outside):
    (root / FILE).write_bytes(pickle.dumps(object()))


def _symlink(root, outside):
    shutil.copyfile(root / FILE, outside / "linked.h5")
    (root / FILE).unlink()
    (root / FILE).symlink_to(outside / "linked.h5")


CASES = {
    "external-link": _edit(_external_link),
    "soft-link": _edit(_soft_link),
    "external-storage": _edit(_external_storage),
    "virtual-dataset": _edit(_virtual),
    "dtype:float64": _replace_obs(data=torch.zeros(12, 3, dtype=torch.float64).numpy()),
    "dtype:vlen-str": _replace_obs(shape=(12,), dtype=h5py.string_dtype()),
    "shape:lead": _replace_obs(data=torch.zeros(11, 3).numpy()),
    "shape:bomb": _replace_obs(shape=(12, 10**8), dtype="float32", compression="gzip"),
    "dtype-attr:object": _edit(lambda f, o: f["data/obs"].attrs.__setitem__("dtype", "object")),
    "bool:two": _edit(_bad_bool),
    "meta:filled-huge": _set_meta("filled", 10**12),
    "meta:env-string": _set_meta("env_shape", "ab"),
    "meta:not-json": _edit(lambda f, o: f.attrs.__setitem__("meta", "{not json")),
    "meta:deep": _edit(lambda f, o: f.attrs.__setitem__("meta", "[" * 5000 + "]" * 5000)),
    "format:missing": _edit(lambda f, o: f.attrs.__delitem__("format")),
    "group:missing": _edit(lambda f, o: f.__delitem__("data")),
    "marker:dotdot": _marker("../../outside.h5"),
    "marker:absolute": _marker("/etc/passwd"),
    "file:missing": lambda root, outside: (root / FILE).unlink(),
    "file:symlink": _symlink,
}


def test_every_hostile_h5_checkpoint_is_refused_naming_the_file(tmp_path):
    rb = _buffer(checkpointer=H5StorageCheckpointer())
    rb.extend(_data())
    rb.dumps(tmp_path / "template")
    _buffer().loads(tmp_path / "template")  # warm-up outside the audit
    cases = {c.name: c.mutate for c in _generic_cases([FILE], [])}
    cases.update({"pickle-as-h5": _pickled, **CASES})
    problems = []
    for i, (name, mutate) in enumerate(cases.items()):
        root, outside = tmp_path / f"case{i}" / "ckpt", tmp_path / f"outside{i}"
        outside.mkdir()
        shutil.copytree(tmp_path / "template", root)
        mutate(root, outside)
        target = _buffer()
        target.extend(_data((5,)))
        error = None
        with LoadAudit(root.parent) as audit:
            try:
                target.loads(root)
            except BaseException as err:
                error = err
        bad = check_outcome(error, root) if error is not None else "loaded"
        if audit.events:
            bad = f"audit events {audit.events[:3]}"
        if (outside / MARKER).exists():
            bad = "a payload ran"
        if bad is None:
            assert len(target) == 5, name  # a refused checkpoint leaves the buffer as it was
        else:
            problems.append(f"{name}: {bad}")
    assert not problems, "\n".join(problems)
