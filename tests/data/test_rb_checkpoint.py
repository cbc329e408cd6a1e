"""Pickle-free, atomic replay buffer checkpoints (dumps/loads) and state dicts."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)
from tdrl.data.replay import _checkpoint
from tdrl.errors import CheckpointError

STORAGES = {"tensor": LazyTensorStorage, "memmap": LazyMemmapStorage}
SAMPLERS = {
    "random": RandomSampler,
    "without_replacement": lambda: SamplerWithoutReplacement(drop_last=True),
    "prioritized": lambda: PrioritizedSampler(200, alpha=0.7, beta=0.5),
    "slice": lambda: SliceSampler(slice_len=4, traj_key=("collector", "traj")),
}
WRITERS = {
    "round_robin": RoundRobinWriter,
    "max_value": lambda: TensorDictMaxValueWriter(rank_key=("next", "reward")),
}


def chunk(i: int, n: int = 40) -> TensorDict:
    g = torch.Generator().manual_seed(i)
    step = torch.arange(i * n, (i + 1) * n)
    return TensorDict(
        {
            "obs": torch.randn(n, 3, generator=g),
            "action": torch.randint(4, (n, 1), generator=g),
            "collector": {"traj": step // 10},
            "next": {
                "obs": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, 1, generator=g),
                "done": (step % 10 == 9).unsqueeze(-1),
            },
        },
        [n],
    )


def build(storage: str, sampler: str, writer: str, seed: int = 0) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=STORAGES[storage](200),
        sampler=SAMPLERS[sampler](),
        writer=WRITERS[writer](),
        batch_size=16,
        generator=torch.Generator().manual_seed(seed),
    )


def play(rb: TensorDictReplayBuffer, rounds: int) -> None:
    for i in range(rounds):
        rb.extend(chunk(i))
        sample = rb.sample()
        if isinstance(rb.sampler, PrioritizedSampler):
            sample["td_error"] = sample["obs"].abs().sum(-1)
            rb.update_tensordict_priority(sample)


def assert_same_batches(a: TensorDictReplayBuffer, b: TensorDictReplayBuffer, n: int = 100) -> None:
    for _ in range(n):
        x, y = a.sample(), b.sample()
        assert torch.equal(x["index"], y["index"])
        assert (x == y).all()


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("storage", STORAGES)
def test_round_trip_every_combination(tmp_path, storage, sampler, writer):
    rb = build(storage, sampler, writer)
    play(rb, 7)  # 280 elements into 200 slots: the ring wraps / the writer competes
    rb.dumps(tmp_path / "ckpt")
    loaded = build(storage, sampler, writer, seed=123)  # the generator state is restored
    loaded.loads(tmp_path / "ckpt")
    assert len(loaded) == len(rb) == 200
    everything = torch.arange(len(rb))
    assert (loaded.storage.get(everything) == rb.storage.get(everything)).all()
    assert_same_batches(rb, loaded)
    # Both keep working identically after the restore.
    rb.extend(chunk(50))
    loaded.extend(chunk(50))
    assert_same_batches(rb, loaded, 5)


@pytest.mark.parametrize("storage", STORAGES)
def test_round_trip_env_time_layout(tmp_path, storage):
    def make():
        return TensorDictReplayBuffer(
            storage=STORAGES[storage](60, ndim=2),
            sampler=SliceSampler(slice_len=3, end_key=("next", "done")),
            batch_size=12,
            generator=torch.Generator().manual_seed(0),
        )

    rb = make()
    for i in range(5):
        rb.extend(chunk(i, 40).reshape(4, 10))
    rb.dumps(tmp_path / "ckpt")
    loaded = make()
    loaded.loads(tmp_path / "ckpt")
    assert len(loaded) == 60 and loaded.storage.unravel_index(torch.tensor([59])).tolist() == [
        [14, 3]  # (time, env), as TorchRL's coordinates
    ]
    assert_same_batches(rb, loaded)


def test_round_trip_pytree_and_empty(tmp_path):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=3, generator=torch.Generator().manual_seed(0)
    )
    rb.dumps(tmp_path / "empty")
    rb.extend({"a": torch.arange(6), "b": [torch.ones(6, 2, dtype=torch.bfloat16)]})
    rb.dumps(tmp_path / "full")
    loaded = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    loaded.loads(tmp_path / "full")
    assert torch.equal(loaded.sample()["a"], rb.sample()["a"])
    assert loaded.sample()["b"][0].dtype == torch.bfloat16
    loaded.loads(tmp_path / "empty")
    assert len(loaded) == 0


def test_seed_example(tmp_path):
    """The example of the design discussion: a 1M-element memmap buffer with priorities."""
    size = 1_000_000

    def make():
        return TensorDictReplayBuffer(
            storage=LazyMemmapStorage(size), sampler=PrioritizedSampler(size, 1.1, 1.0)
        )

    rb = make()
    for _ in range(100):
        data = TensorDict(
            {
                "obs": torch.randn(100, 3, 4),
                "next": {"obs": torch.randn(100, 3, 4)},
                "td_error": torch.rand(100),
            },
            [100],
        )
        rb.extend(data)
        sample = rb.sample(32)
        rb.update_tensordict_priority(sample)
    rb.dumps(tmp_path)  # an existing, empty directory (as tempfile.TemporaryDirectory gives)
    assert sorted(os.listdir(tmp_path / "storage" / "data")) == [
        "meta.json",
        "next",
        "obs.memmap",
        "td_error.memmap",
    ]
    assert sorted(os.listdir(tmp_path / "sampler")) == [
        "meta.json",
        "mintree.memmap",
        "sumtree.memmap",
    ]
    loaded = make()
    loaded.loads(tmp_path)
    assert len(rb) == len(loaded) == 10_000
    torch.manual_seed(0)
    s1 = rb.sample(32)
    torch.manual_seed(0)
    s2 = loaded.sample(32)
    assert torch.equal(s1["index"], s2["index"]) and (s1 == s2).all()


def test_dumping_twice_replaces(tmp_path):
    rb = build("tensor", "random", "round_robin")
    play(rb, 1)
    rb.dumps(tmp_path / "ckpt")
    play(rb, 2)
    rb.dumps(tmp_path / "ckpt")
    loaded = build("tensor", "random", "round_robin")
    loaded.loads(tmp_path / "ckpt")
    assert len(loaded) == 120
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no temporary leftovers


def test_interrupted_dump_keeps_previous_checkpoint(tmp_path, monkeypatch):
    rb = build("memmap", "prioritized", "round_robin")
    play(rb, 2)
    rb.dumps(tmp_path / "ckpt")
    play(rb, 2)
    calls = {"n": 0}
    real = _checkpoint._write_tensor

    def failing(path, tensor):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError("disk full")
        return real(path, tensor)

    monkeypatch.setattr(_checkpoint, "_write_tensor", failing)
    with pytest.raises(OSError, match="disk full"):
        rb.dumps(tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    loaded = build("memmap", "prioritized", "round_robin")
    loaded.loads(tmp_path / "ckpt")
    assert len(loaded) == 80


def test_swap_without_renameat2_recovers_previous(tmp_path, monkeypatch):
    """Where the atomic exchange is missing, a kill between the two renames is recovered."""
    rb = build("tensor", "random", "round_robin")
    play(rb, 1)
    rb.dumps(tmp_path / "ckpt")
    play(rb, 1)
    monkeypatch.setattr(_checkpoint, "_exchange", lambda a, b: False)
    real_rename, calls = os.rename, {"n": 0}

    def killed_between(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the process dies after moving the old checkpoint aside
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", killed_between)
    with pytest.raises(KeyboardInterrupt):
        rb.dumps(tmp_path / "ckpt")
    monkeypatch.setattr(os, "rename", real_rename)
    assert not (tmp_path / "ckpt").exists()
    loaded = build("tensor", "random", "round_robin")
    loaded.loads(tmp_path / "ckpt")  # finds the previous checkpoint set aside
    assert len(loaded) == 40
    rb.dumps(tmp_path / "ckpt")  # the next dump completes and cleans up
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    loaded.loads(tmp_path / "ckpt")
    assert len(loaded) == 80


CHILD = textwrap.dedent(
    """
    import sys, torch
    from tensordict import TensorDict
    from tdrl.data import LazyMemmapStorage, PrioritizedSampler, TensorDictReplayBuffer
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(20000), sampler=PrioritizedSampler(20000, 0.7, 0.5))
    for i in range(1000):
        # ~2 MB per chunk: a dump takes long enough for the kill to land inside one.
        rb.extend(TensorDict({"obs": torch.randn(2000, 256), "i": torch.full((2000,), i)}, [2000]))
        print("start", i, flush=True)
        rb.dumps(sys.argv[1])
    """
)


@pytest.mark.timeout(60)
def test_process_killed_mid_dump(tmp_path):
    path = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        for line in proc.stdout:
            if line.strip() == "start 3":  # the child is now inside its fourth dump
                break
        proc.kill()
    finally:
        proc.wait(30)
    loaded = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(20000), sampler=PrioritizedSampler(20000, 0.7, 0.5)
    )
    loaded.loads(path)
    # A complete dump (the third, the fourth, or a later one if the kill came late), never a mix.
    assert len(loaded) >= 6000
    chunk_ids = loaded.storage.get_leaf("i")
    last = int(chunk_ids.max())
    assert len(loaded) == min((last + 1) * 2000, 20000)
    assert torch.equal(chunk_ids % 10, torch.arange(len(loaded)) // 2000 % 10)  # ring slots
    assert loaded.sampler.weights(torch.arange(len(loaded))).gt(0).all()


def test_loading_never_unpickles(tmp_path, monkeypatch):
    rb = build("memmap", "prioritized", "max_value")
    play(rb, 3)
    rb.dumps(tmp_path / "ckpt")

    def forbidden(*args, **kwargs):
        raise AssertionError("unpickling during loads")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    loaded = build("memmap", "prioritized", "max_value")
    loaded.loads(tmp_path / "ckpt")
    assert_same_batches(rb, loaded, 3)


def test_unknown_files_are_ignored(tmp_path):
    rb = build("tensor", "without_replacement", "round_robin")
    play(rb, 2)
    rb.dumps(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "notes.txt").write_text("hello")
    (tmp_path / "ckpt" / "storage" / "data" / "extra.memmap").write_bytes(b"123")
    (tmp_path / "ckpt" / "sampler" / "more").mkdir()
    loaded = build("tensor", "without_replacement", "round_robin")
    loaded.loads(tmp_path / "ckpt")
    assert_same_batches(rb, loaded, 10)


def test_list_storage_cannot_be_dumped(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend(torch.arange(3))
    with pytest.raises(CheckpointError, match="ListStorage cannot be dumped"):
        rb.dumps(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize(
    ("other", "match"),
    [
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(100), sampler=PrioritizedSampler(200, 0.7, 0.5)
            ),
            r"storage.max_size \(checkpoint 200, this buffer 100\)",
        ),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyMemmapStorage(200), sampler=PrioritizedSampler(200, 0.7, 0.5)
            ),
            "storage.class",
        ),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(200), sampler=PrioritizedSampler(200, 0.6, 0.5)
            ),
            "sampler.alpha",
        ),
        (
            lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(200), sampler=RandomSampler()),
            "sampler.class",
        ),
        (
            lambda: ReplayBuffer(
                storage=LazyTensorStorage(200), sampler=PrioritizedSampler(200, 0.7, 0.5)
            ),
            "buffer.class",
        ),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(200),
                sampler=PrioritizedSampler(200, 0.7, 0.5),
                writer=TensorDictMaxValueWriter(rank_key="r"),
            ),
            "writer.class",
        ),
    ],
    ids=["max_size", "storage", "alpha", "sampler", "buffer", "writer"],
)
def test_mismatched_components(tmp_path, other, match):
    rb = build("tensor", "prioritized", "round_robin")
    play(rb, 2)
    rb.dumps(tmp_path / "ckpt")
    target = other()
    with pytest.raises(CheckpointError, match=match):
        target.loads(tmp_path / "ckpt")
    assert len(target) == 0


def corrupt_truncate(root):
    path = root / "storage" / "data" / "obs.memmap"
    path.write_bytes(path.read_bytes()[:-4])


def corrupt_tree(root):
    path = root / "sampler" / "sumtree.memmap"
    tree = torch.from_file(
        str(path), shared=True, size=os.path.getsize(path) // 8, dtype=torch.float64
    )
    tree[-1] += 1.0  # an inner node that is not the sum of its children


def edit_meta(root, folder, fn):
    path = root / folder / "meta.json"
    meta = json.loads(path.read_text())
    fn(meta["entries"])
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (corrupt_truncate, "truncated"),
        (lambda r: os.remove(r / "writer" / "meta.json"), "missing .*meta.json"),
        (lambda r: (r / "sampler" / "meta.json").write_text("{not json"), "unreadable"),
        (
            lambda r: os.remove(r / "storage" / "data" / "next" / "obs.memmap"),
            "missing tensor file",
        ),
        (
            lambda r: edit_meta(r, "storage/data", lambda e: e["obs"].update(dtype="object")),
            "invalid tensor metadata",
        ),
        (
            lambda r: edit_meta(r, "storage/data", lambda e: e["obs"].update(file="../../x")),
            "invalid file name",
        ),
        (
            lambda r: edit_meta(r, "storage/data", lambda e: e["obs"].update(shape=[7, 3])),
            "wrong shape|bytes",
        ),
        (
            lambda r: edit_meta(r, "writer", lambda e: e["cursor"].update(value=-3)),
            "invalid cursor",
        ),
        (lambda r: os.remove(r / "buffer_metadata.json"), "missing .*buffer_metadata.json"),
        (corrupt_tree, "inconsistent|disagree"),
        (lambda r: edit_meta(r, "sampler", lambda e: e.pop("mintree")), "invalid sampler state"),
    ],
    ids=[
        "truncated",
        "no_meta",
        "bad_json",
        "no_file",
        "dtype",
        "escape",
        "shape",
        "cursor",
        "no_header",
        "tree",
        "partial",
    ],
)
def test_corrupted_checkpoints_raise(tmp_path, corrupt, match):
    rb = build("tensor", "prioritized", "round_robin")
    play(rb, 3)
    rb.dumps(tmp_path / "ckpt")
    corrupt(tmp_path / "ckpt")
    target = build("tensor", "prioritized", "round_robin")
    play(target, 1)
    with pytest.raises(CheckpointError, match=match):
        target.loads(tmp_path / "ckpt")
    assert len(target) == 40  # untouched


def test_missing_and_foreign_directories(tmp_path):
    rb = build("tensor", "random", "round_robin")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        rb.loads(tmp_path / "nothing")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("keep me")
    play(rb, 1)
    with pytest.raises(CheckpointError, match="refusing to replace"):
        rb.dumps(tmp_path / "mine")
    assert (tmp_path / "mine" / "precious.txt").read_text() == "keep me"


def test_state_dict_survives_torch_save_weights_only(tmp_path):
    rb = build("memmap", "slice", "round_robin")
    play(rb, 3)
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    loaded = build("memmap", "slice", "round_robin")
    loaded.load_state_dict(torch.load(tmp_path / "rb.pt", weights_only=True))
    assert_same_batches(rb, loaded, 10)
    with pytest.raises(CheckpointError, match="not a replay buffer state"):
        loaded.load_state_dict({"format": "other"})
