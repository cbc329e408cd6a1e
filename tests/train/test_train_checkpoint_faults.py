"""Disk faults while a training checkpoint is written: an ``OSError`` (no space, a read-only
folder, a quota) or a Ctrl-C injected at each write, fsync, mkdir and rename of the writer (the
replay buffer's dump included) leaves the previous checkpoint intact and loadable and nothing
half-written that ``--resume`` could pick; the trainer warns and retries at the next interval,
or stops with an error naming the path. A real full tmpfs closes the file."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError
from tensordict import TensorDict

from tdrl.data import LazyTensorStorage, TensorDictReplayBuffer
from tdrl.train import checkpoints, latest_checkpoint, load_latest, verify_checkpoint
from tdrl.train._checkpoint import CheckpointWriteError, save_checkpoint
from tdrl.train.cli import main

pytestmark = pytest.mark.timeout(120)


class _File:
    """A file object whose first write goes through the injector (JSON is written in many
    small pieces: a fault in the first stands for a fault in any)."""

    def __init__(self, inner, faults):
        self._inner, self._faults, self._written = inner, faults, False

    def write(self, data):
        if not self._written:
            self._written = True
            self._faults.call("write")
        return self._inner.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._inner.close()

    def __iter__(self):
        return iter(self._inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Faults:
    """Counts the file-system calls that write (open for writing, write, fsync, mkdir,
    rename, safetensors' save) and makes call number ``fail_at`` raise ``error``."""

    def __init__(self, monkeypatch, fail_at=None, error=None):
        self.calls: list[str] = []
        self.fail_at = fail_at
        self.error = error or OSError(errno.ENOSPC, "No space left on device")
        real_open, rename, replace, mkdir = open, os.rename, os.replace, os.mkdir
        save_file = safetensors.torch.save_file

        def opener(file, mode="r", *args, **kwargs):
            writing = any(c in mode for c in "wax+")
            if writing:
                self.call("open")
            f = real_open(file, mode, *args, **kwargs)
            return _File(f, self) if writing else f

        def wrap(name, fn):
            def call(*args, **kwargs):
                self.call(name)
                return fn(*args, **kwargs)

            return call

        monkeypatch.setattr(builtins, "open", opener)
        monkeypatch.setattr(io, "open", opener)
        # counted, not done: durability is not what these tests measure, and fsyncs are slow
        monkeypatch.setattr(os, "fsync", wrap("fsync", lambda fd: None))
        monkeypatch.setattr(os, "rename", wrap("rename", rename))
        monkeypatch.setattr(os, "replace", wrap("replace", replace))
        monkeypatch.setattr(os, "mkdir", wrap("mkdir", mkdir))
        monkeypatch.setattr(safetensors.torch, "save_file", wrap("save_file", save_file))

    def call(self, name):
        self.calls.append(name)
        if self.fail_at is not None and len(self.calls) - 1 == self.fail_at:
            raise self.error


def _objects():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(32), batch_size=4)
    rb.extend(TensorDict({"obs": torch.randn(8, 3), "next": {"obs": torch.randn(8, 3)}}, [8]))
    return net, opt, rb


def _save(run_dir, frames, net, opt, rb):
    return save_checkpoint(
        run_dir,
        frames=frames,
        modules={"net": net},
        optimizers={"optim": opt},
        counters={"iteration": frames},
        buffer=rb,
        state={"extra": torch.arange(3.0)},
    )


def _count(tmp_path, monkeypatch, net, opt, rb):
    """The calls of a second save (the one the faults hit), counted."""
    _save(tmp_path / "count", 10, net, opt, rb)
    with monkeypatch.context() as m:
        counter = Faults(m)
        _save(tmp_path / "count", 20, net, opt, rb)
    shutil.rmtree(tmp_path / "count")
    return counter


def _check_intact(run_dir, net, opt, rb):
    """Every ckpt-* verifies, the first one loads, and no temporary folder is left."""
    root = run_dir / "checkpoints"
    assert not [p.name for p in root.iterdir() if p.name.startswith(".tmp-")]
    for path in checkpoints(run_dir):
        verify_checkpoint(path)
    assert (root / "ckpt-000000010").is_dir()
    fresh = TensorDictReplayBuffer(storage=LazyTensorStorage(32), batch_size=4)
    path, counters = load_latest(
        run_dir, where="test", modules={"net": net}, optimizers={"optim": opt}, buffer=fresh
    )
    assert len(fresh) == len(rb) and counters["state"]["extra"].tolist() == [0.0, 1.0, 2.0]


def test_every_injected_write_fault_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    net, opt, rb = _objects()
    counter = _count(tmp_path, monkeypatch, net, opt, rb)
    kinds = set(counter.calls)
    assert {"open", "write", "fsync", "mkdir", "rename", "save_file"} <= kinds, kinds
    n = len(counter.calls)
    for k in range(n):
        run_dir = tmp_path / f"run{k}"
        _save(run_dir, 10, net, opt, rb)
        with monkeypatch.context() as m:
            Faults(m, fail_at=k)
            try:
                _save(run_dir, 20, net, opt, rb)
            except CheckpointWriteError as err:
                assert err.errno == errno.ENOSPC
                assert "ckpt-000000020" in str(err) and "previous checkpoints" in str(err)
            else:  # a fault the writer could shrug off (an existing folder's mkdir), or the
                # folder's fsync after the rename: the new checkpoint is complete anyway
                assert counter.calls[k] == "mkdir" or k >= n - 2, (k, counter.calls[k])
                verify_checkpoint(run_dir / "checkpoints" / "ckpt-000000020")
        _check_intact(run_dir, net, opt, rb)
        shutil.rmtree(run_dir)


def test_safetensors_io_errors_are_write_errors_with_their_errno(tmp_path, monkeypatch):
    net, opt, rb = _objects()
    _save(tmp_path, 10, net, opt, rb)
    counter = _count(tmp_path, monkeypatch, net, opt, rb)
    # safetensors raises its own error type for the OS's: a full disk looks like this
    full = SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    )
    with monkeypatch.context() as m:
        Faults(m, fail_at=counter.calls.index("save_file"), error=full)
        with pytest.raises(CheckpointWriteError, match="No space left on device") as info:
            _save(tmp_path, 20, net, opt, rb)
    assert info.value.errno == errno.ENOSPC
    _check_intact(tmp_path, net, opt, rb)


def test_a_ctrl_c_at_each_write_step_leaves_no_half_checkpoint(tmp_path, monkeypatch):
    net, opt, rb = _objects()
    counter = _count(tmp_path, monkeypatch, net, opt, rb)
    for k in range(0, len(counter.calls), 3):
        run_dir = tmp_path / f"run{k}"
        _save(run_dir, 10, net, opt, rb)
        with monkeypatch.context() as m:
            Faults(m, fail_at=k, error=KeyboardInterrupt())
            try:
                _save(run_dir, 20, net, opt, rb)
            except KeyboardInterrupt:
                pass
        _check_intact(run_dir, net, opt, rb)
        shutil.rmtree(run_dir)


def test_a_writer_killed_mid_write_leaves_a_folder_the_next_save_removes(tmp_path):
    net, opt, rb = _objects()
    _save(tmp_path, 10, net, opt, rb)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    pid = int(dead.stdout)  # a pid that no longer runs
    stale = tmp_path / "checkpoints" / f".tmp-ckpt-000000020-{pid}"
    (stale / "buffer").mkdir(parents=True)
    (stale / "tensors.safetensors").write_bytes(b"half")
    assert latest_checkpoint(tmp_path).name == "ckpt-000000010"  # never picked
    _save(tmp_path, 30, net, opt, rb)
    assert not stale.exists()
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-000000010", "ckpt-000000030"]


def test_saving_the_same_frame_again_replaces_it_without_a_gap(tmp_path, monkeypatch):
    net, opt, rb = _objects()
    _save(tmp_path, 10, net, opt, rb)
    with monkeypatch.context() as m:  # the rename of the new folder fails: the old one is back
        faults = Faults(m)
        real = os.rename

        def failing(src, dst):
            if str(src).endswith(f"-{os.getpid()}") and "old-" not in str(src):
                raise OSError(errno.EROFS, "Read-only file system")
            return real(src, dst)

        m.setattr(os, "rename", failing)
        with pytest.raises(CheckpointWriteError, match="Read-only file system"):
            _save(tmp_path, 10, net, opt, rb)
        assert faults is not None
    _check_intact(tmp_path, net, opt, rb)
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-000000010"]


RUN = [
    "train",
    "a2c",
    "--frames",
    "256",
    "--num-envs",
    "2",
    "--quiet",
    "--set",
    "collector.frames_per_batch=64",
    "--set",
    "eval.episodes=1",
    "--set",
    "eval.every_frames=0",
    "--set",
    "logging.checkpoint_every_frames=64",
]


def _failing_second_save(monkeypatch, error=errno.ENOSPC):
    """The trainer's second checkpoint fails at its first fsync."""
    import tdrl.train._trainer as trainer_module

    calls = []
    real = trainer_module.save_checkpoint

    def save(*args, **kwargs):
        calls.append(kwargs["frames"])
        if len(calls) == 2:
            with monkeypatch.context() as m:
                Faults(m, fail_at=1, error=OSError(error, os.strerror(error)))
                return real(*args, **kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "save_checkpoint", save)
    return calls


def test_the_trainer_warns_and_retries_at_the_next_interval_by_default(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    calls = _failing_second_save(monkeypatch)
    assert main([*RUN, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert (
        "tdrl train: warning: checkpoint at frame 128 failed, training goes on and retries at "
        in err
    )
    assert "frame 192" in err and "ckpt-000000128" in err and "No space left on device" in err
    assert calls == [64, 128, 192, 256]  # retried at the next interval
    assert [p.name for p in checkpoints(out)] == ["ckpt-000000192", "ckpt-000000256"]
    assert json.loads((out / "summary.json").read_text())["frames"] == 256


def test_checkpoint_on_error_stop_ends_the_run_naming_the_path(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _failing_second_save(monkeypatch, errno.EROFS)
    argv = [*RUN, "--out", str(out), "--set", "logging.checkpoint_on_error=stop"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "tdrl train: error: save_checkpoint: could not write the checkpoint " in err
    assert f"{out}/checkpoints/ckpt-000000128" in err and "Read-only file system" in err
    assert [p.name for p in checkpoints(out)] == ["ckpt-000000064"]
    monkeypatch.undo()
    assert main(["train", "--resume", str(out), "--quiet"]) == 0  # from the intact one
    assert json.loads((out / "summary.json").read_text())["frames"] == 256


def test_an_unknown_checkpoint_on_error_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"unknown logging\.checkpoint_on_error"):
        main([*RUN, "--out", str(tmp_path), "--set", "logging.checkpoint_on_error=ignore"])


_ORCHESTRATE = textwrap.dedent(
    """
    import os, pathlib, subprocess, sys, time
    mnt, python, log = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    run = mnt / "run"
    argv = [python, "-m", "tdrl", "train", "dqn", "--frames", "3072", "--num-envs", "4",
            "--quiet", "--out", str(run)] + sys.argv[4:]
    err = open(log, "w")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)

    def until(predicate, what):
        deadline = time.monotonic() + 90
        while not predicate():
            assert proc.poll() is None and time.monotonic() < deadline, what
            time.sleep(0.05)

    until(lambda: any((run / "checkpoints").glob("ckpt-*")), "a first checkpoint")
    filler = mnt / "filler"  # another program fills the disk (16 KB left: metrics rows fit)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - 16384))
    os.close(fd)
    until(lambda: "warning: checkpoint at frame" in log.read_text(), "a checkpoint warning")
    filler.unlink()  # ... and frees it again: the next interval succeeds
    out, _ = proc.communicate(timeout=90)
    from tdrl.train import checkpoints, verify_checkpoint
    kept = checkpoints(run)
    for path in kept:
        verify_checkpoint(path)
    names = [p.name for p in (run / "checkpoints").iterdir()]
    print("CODE", proc.returncode, "KEPT", [p.name for p in kept], "ALL", names)
    print(out)
    """
)


def _unshare():
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("needs unshare(1) and mount(8) for a private tmpfs")
    return ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]


def test_a_full_tmpfs_warns_and_the_next_interval_succeeds_once_space_is_back(tmp_path):
    # a private 4 MB tmpfs (a mount namespace of its own), filled by another file mid-run
    sets = [
        "collector.frames_per_batch=128",
        "collector.init_random_frames=128",
        "loss.updates_per_frame=0.05",
        "buffer.batch_size=16",
        "buffer.capacity=4000",
        "model.hidden=[16]",
        "eval.every_frames=0",
        "eval.episodes=1",
        "logging.checkpoint_every_frames=128",
    ]
    (tmp_path / "mnt").mkdir()
    log = tmp_path / "train.err"
    argv = [*_unshare(), sys.executable, "-c", _ORCHESTRATE, str(tmp_path / "mnt")]
    argv += [sys.executable, str(log), *[x for s in sets for x in ("--set", s)]]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=110)
    if run.returncode and "Operation not permitted" in run.stderr:
        pytest.skip(f"no private mount here: {run.stderr.strip()[:200]}")
    assert run.returncode == 0, run.stderr[-3000:] + log.read_text()[-3000:]
    err = log.read_text()
    assert "warning: checkpoint at frame" in err and "No space left on device" in err
    code, kept = run.stdout.split("CODE ")[1].split(" KEPT ")
    assert code == "0", err[-3000:]
    assert "ckpt-000003072" in kept and ".tmp-" not in kept  # the end is saved, nothing half
    assert '"frames": 3072' in run.stdout
