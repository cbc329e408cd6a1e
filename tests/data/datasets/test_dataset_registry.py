"""load_dataset / register_dataset: TorchRL's "<source>:<id>" entry point."""

from __future__ import annotations

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from tdrl.data.datasets import (  # noqa: E402
    D4RLExperienceReplay,
    _registry,
    load_dataset,
    register_dataset,
)


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch):
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))


def test_d4rl_prefix_builds_the_dataset(tmp_path):
    path = tmp_path / "toy.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = np.arange(4, dtype=np.float32)[:, None]
        f["actions"] = np.zeros((4, 1), np.float32)
        f["rewards"] = np.ones(4, np.float32)
        f["terminals"] = np.zeros(4, bool)
    data = load_dataset(f"d4rl:{path}", batch_size=2, root=tmp_path / "c")
    assert isinstance(data, D4RLExperienceReplay) and len(data) == 3


def test_registered_factory_gets_the_id_and_kwargs():
    register_dataset("toy", lambda dataset_id, **kw: (dataset_id, kw))
    assert load_dataset("toy:a/b:c", batch_size=3) == ("a/b:c", {"batch_size": 3})
    with pytest.raises(KeyError, match="already registered"):
        register_dataset("toy", dict)
    register_dataset("toy", "builtins:str", replace=True)  # imported on first use
    assert load_dataset("toy:x") == "x"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: load_dataset("no-prefix"), "no source prefix"),
        (lambda: load_dataset("nowhere:x"), "unknown dataset source 'nowhere'"),
        (lambda: register_dataset("a:b", dict), "invalid source prefix"),
        (lambda: register_dataset("x", "no_colon"), "invalid import string"),
        (lambda: register_dataset("x", 3), "not callable"),
    ],
)
def test_bad_input_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
