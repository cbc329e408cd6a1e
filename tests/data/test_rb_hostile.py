"""Hostile replay-buffer checkpoints: every load gives valid data or a CheckpointError naming the
file, runs no pickle/exec/process and reads nothing outside the checkpoint folder."""

from __future__ import annotations

import shutil

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from tdrl.errors import CheckpointError
from tdrl.testing._hostile import MARKER, LoadAudit, buffer_cases, check_outcome

CAPACITY, STORED = 64, 40


def _sampler(kind):
    return {
        "random": RandomSampler,
        "without_replacement": SamplerWithoutReplacement,
        "prioritized": lambda: PrioritizedSampler(CAPACITY, alpha=0.6, beta=0.4),
        "slice": lambda: SliceSampler(num_slices=2, traj_key="traj"),
        "slice_without_replacement": lambda: SliceSamplerWithoutReplacement(
            num_slices=2, traj_key="traj"
        ),
        "prioritized_slice": lambda: PrioritizedSliceSampler(
            CAPACITY, alpha=0.6, beta=0.4, num_slices=2, traj_key="traj"
        ),
    }[kind]()


def _buffer(kind, storage):
    make = LazyMemmapStorage if storage == "memmap" else LazyTensorStorage
    return TensorDictReplayBuffer(storage=make(CAPACITY), sampler=_sampler(kind), batch_size=8)


def _data(n):
    return TensorDict(
        {
            "obs": torch.randn(n, 3),
            "traj": torch.arange(n) // 10,
            "next": {"obs": torch.randn(n, 3), "done": torch.zeros(n, 1, dtype=torch.bool)},
        },
        [n],
    )


def _check_valid(rb, where):
    """A buffer that loaded must be internally sound: its length within capacity, sampling works
    and returns indices of stored elements only."""
    assert 0 <= len(rb) <= CAPACITY, where
    if len(rb):
        sample = rb.sample()
        assert sample["index"].max() < len(rb), where
        assert sample["obs"].shape[-1] == 3, where


CONFIGS = [
    (sampler, storage)
    for sampler in (
        "random",
        "without_replacement",
        "prioritized",
        "slice",
        "slice_without_replacement",
        "prioritized_slice",
    )
    for storage in ("tensor", "memmap")
]


@pytest.mark.parametrize("sampler,storage", CONFIGS)
def test_every_hostile_checkpoint_loads_valid_data_or_raises_checkpoint_error(
    tmp_path, sampler, storage
):
    original = _buffer(sampler, storage)
    original.extend(_data(STORED))
    if sampler in ("without_replacement", "slice_without_replacement"):
        original.sample()  # an epoch in progress: a permutation is saved
    template = tmp_path / "template"
    original.dumps(template)
    cases = buffer_cases(template)
    assert len(cases) >= 70
    # Warm up: the first load imports what loading needs, outside the audit.
    _buffer(sampler, storage).loads(template)
    problems = []
    for i, case in enumerate(cases):
        work, outside = tmp_path / f"case{i}", tmp_path / f"outside{i}"
        outside.mkdir()
        shutil.copytree(template, work / "ckpt")
        case.mutate(work / "ckpt", outside)
        target = _buffer(sampler, storage)
        target.extend(_data(5))
        error = None
        with LoadAudit(work) as audit:
            try:
                target.loads(work / "ckpt")
            except BaseException as err:
                error = err
        bad = check_outcome(error, work / "ckpt")
        if bad is None and error is None:
            _check_valid(target, case.name)
        if bad is None and error is not None:
            # A refused checkpoint leaves the buffer as it was, and usable.
            assert len(target) == 5, case.name
            _check_valid(target, case.name)
        if audit.events:
            bad = f"audit events {audit.events[:3]}"
        if (outside / MARKER).exists():
            bad = "the pickle payload ran"
        if bad is not None:
            problems.append(f"{case.name}: {bad}")
    assert not problems, "\n".join(problems)


def test_the_seeded_problems_are_refused(tmp_path):
    """The reported cases by name: each must be a CheckpointError, not a silent load."""
    rb = _buffer("without_replacement", "tensor")
    rb.extend(_data(STORED))
    rb.sample()
    rb.dumps(tmp_path / "template")
    cases = {c.name: c for c in buffer_cases(tmp_path / "template")}
    must_refuse = {
        "uninitialized-with-len": "holds nothing yet records data",
        "len:huge": "disagree on the number of elements",
        "perm:out-of-range": "not a permutation",
        "perm:zeros": "not a permutation",
        "perm:repeated": "not a permutation",
        "deep-json:meta.json": "nested too deep",
        "symlink:tensor": "symbolic link",
        "symlink:folder": "symbolic link",
        "fifo:tensor": "not a regular file",
        "path:dotdot-file": "invalid file name",
        "cursor:1000000000": "cursor is outside",
    }
    for i, (name, message) in enumerate(must_refuse.items()):
        path = tmp_path / f"c{i}"
        shutil.copytree(tmp_path / "template", path)
        cases[name].mutate(path, tmp_path)
        with pytest.raises(Exception) as info:
            _buffer("without_replacement", "tensor").loads(path)
        assert type(info.value).__name__ == "CheckpointError", (name, info.value)
        assert message in str(info.value), (name, str(info.value))


def test_a_symlinked_checkpoint_root_is_refused_for_load_and_dump(tmp_path):
    rb = _buffer("random", "tensor")
    rb.extend(_data(STORED))
    rb.dumps(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link"):
        _buffer("random", "tensor").loads(tmp_path / "link")
    with pytest.raises(ValueError, match="symbolic link"):
        rb.dumps(tmp_path / "link")
    _buffer("random", "tensor").loads(tmp_path / "real")  # the real folder still loads


def test_prioritized_nan_priority_is_refused(tmp_path):
    rb = _buffer("prioritized", "tensor")
    rb.extend(_data(STORED))
    rb.dumps(tmp_path / "template")
    cases = {c.name: c for c in buffer_cases(tmp_path / "template")}
    for i, name in enumerate(("priority:nan", "priority:beyond-len")):
        path = tmp_path / f"c{i}"
        shutil.copytree(tmp_path / "template", path)
        cases[name].mutate(path, tmp_path)
        target = _buffer("prioritized", "tensor")
        with pytest.raises(ValueError) as info:
            target.loads(path)
        assert type(info.value).__name__ == "CheckpointError"
        assert str(path / "sampler") in str(info.value)


def test_the_audit_sees_pickle_and_reads_outside(tmp_path):
    """The audit used above is not blind: it records an unpickled global and an outside read."""
    import pickle

    inside, outside = tmp_path / "inside", tmp_path / "outside.txt"
    inside.mkdir()
    outside.write_text("x")
    (inside / "link").symlink_to(outside)
    with LoadAudit(inside) as audit:
        pickle.loads(pickle.dumps(CheckpointError("x")))
        outside.read_text()
        (inside / "link").read_text()
    kinds = [event for event, _ in audit.events]
    assert "pickle.find_class" in kinds
    assert kinds.count("open outside") == 2
