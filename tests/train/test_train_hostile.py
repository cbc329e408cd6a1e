"""Hostile training checkpoints and a resume that falls back to the newest one that verifies."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.errors import CheckpointError
from tdrl.testing._hostile import MARKER, LoadAudit, check_outcome, train_cases
from tdrl.train import load_checkpoint, save_checkpoint
from tdrl.train.cli import main


def _objects():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)
    rb.extend(TensorDict({"obs": torch.randn(10, 3)}, [10]))
    return net, opt, rb


def _fresh():
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), batch_size=4)
    return net, opt, rb


def _load(path, net, opt, rb):
    return load_checkpoint(
        path,
        modules={"net": net},
        optimizers={"optim": opt},
        buffer=rb,
        restore_rng=True,
        check=lambda c: int(c["iteration"]),
    )


def test_every_hostile_training_checkpoint_loads_valid_data_or_raises(tmp_path):
    net, opt, rb = _objects()
    template = save_checkpoint(
        tmp_path / "run",
        frames=64,
        modules={"net": net},
        optimizers={"optim": opt},
        counters={"iteration": 3},
        buffer=rb,
    )
    meta = json.loads((template / "meta.json").read_text())
    assert set(meta["files"]) >= {"tensors.safetensors", "buffer/buffer_metadata.json"}
    cases = train_cases(template)
    assert len(cases) >= 48
    _load(template, *_fresh())  # warm-up imports, outside the audit
    problems = []
    for i, case in enumerate(cases):
        work, outside = tmp_path / f"case{i}", tmp_path / f"outside{i}"
        outside.mkdir()
        shutil.copytree(template, work / "ckpt", symlinks=True)
        case.mutate(work / "ckpt", outside)
        fresh_net, fresh_opt, fresh_rb = _fresh()
        before = [p.detach().clone() for p in fresh_net.parameters()]
        error = None
        with LoadAudit(work) as audit:
            try:
                _load(work / "ckpt", fresh_net, fresh_opt, fresh_rb)
            except BaseException as err:
                error = err
        bad = check_outcome(error, work / "ckpt")
        if error is None:
            assert len(fresh_rb) == 10, case.name
            fresh_net(torch.randn(2, 3))
        elif bad is None:
            # Refused: nothing changed.
            now = list(fresh_net.parameters())
            assert all(torch.equal(a, b) for a, b in zip(before, now)), case.name
            assert len(fresh_rb) == 0 and not fresh_opt.state, case.name
        if audit.events:
            bad = f"audit events {audit.events[:3]}"
        if (outside / MARKER).exists():
            bad = "the pickle payload ran"
        if bad is not None:
            problems.append(f"{case.name}: {bad}")
    assert not problems, "\n".join(problems)


def test_a_tampered_file_fails_its_hash_and_names_it(tmp_path):
    net, opt, rb = _objects()
    path = save_checkpoint(
        tmp_path, frames=1, modules={"net": net}, optimizers={"optim": opt}, counters={}, buffer=rb
    )
    leaf = next((path / "buffer" / "storage" / "data").glob("*.memmap"))
    raw = bytearray(leaf.read_bytes())
    raw[0] ^= 1
    leaf.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="content hash mismatch") as info:
        _load(path, *_fresh())
    assert str(leaf) in str(info.value)


def test_zeroed_weights_with_matching_hashes_load_as_data(tmp_path):
    net, _, _ = _objects()
    path = save_checkpoint(tmp_path, frames=1, modules={"net": net}, optimizers={}, counters={})
    cases = {c.name: c for c in train_cases(path)}
    cases["zeroed-weights"].mutate(path, tmp_path)
    target = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    load_checkpoint(path, modules={"net": target})
    assert all(bool((p == 0).all()) for p in target.parameters())


def _tiny_run(out):
    argv = [
        "train",
        "ppo",
        "--frames",
        "512",
        "--num-envs",
        "2",
        "--out",
        str(out),
        "--quiet",
        "--set",
        "collector.frames_per_batch=128",
        "--set",
        "logging.checkpoint_every_frames=256",
        "--set",
        "eval.every_frames=0",
        "--set",
        "loss.epochs=1",
    ]
    assert main(argv) == 0
    return sorted(p.name for p in (out / "checkpoints").iterdir())


def test_resume_skips_a_corrupt_newest_checkpoint_and_says_why(tmp_path, capsys):
    out = tmp_path / "run"
    names = _tiny_run(out)
    assert names == ["ckpt-000000256", "ckpt-000000512"]
    newest = out / "checkpoints" / names[-1]
    (newest / "tensors.safetensors").write_bytes(b"garbage")
    config = json.loads((out / "config.json").read_text())
    config["frames"] = 768
    (out / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"skipping checkpoint {names[-1]}" in err and "content hash mismatch" in err
    assert "resuming from" in err and names[0] in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == 768


def test_resume_with_no_verifying_checkpoint_stops_with_the_list(tmp_path, capsys):
    out = tmp_path / "run"
    names = _tiny_run(out)
    for name in names:
        (out / "checkpoints" / name / "meta.json").write_text("{broken")
    metrics = (out / "metrics.csv").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint" in err and "verifies" in err
    for name in names:
        assert name in err
    # Nothing started over: the metrics and the checkpoints are as they were.
    assert (out / "metrics.csv").read_text() == metrics
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == names
