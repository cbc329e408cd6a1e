"""Hostile checkpoints: tampered copies of a checkpoint folder, and an audit of what loading does.

:func:`buffer_cases` and :func:`train_cases` return named mutations that turn a copy of a valid
checkpoint (a replay buffer's ``dumps`` folder, or a ``tdrl train`` ``ckpt-*`` folder) into a hostile
one: pickle payloads, planted ``.pkl``/``.pt`` files, truncation, wrong dtypes and shapes, huge
sizes, ``..`` and absolute paths, symbolic links, NUL bytes, deep JSON, NaN priorities, zeroed
weights, out-of-range sampler and writer states, tampered hashes. :class:`LoadAudit` records, through
``sys.addaudithook``, every pickle, exec and process event and every file opened outside a folder
while a load runs. A loader is sound when every case either loads valid data or raises
:class:`~tdrl.errors.CheckpointError` naming the file, with no audit event.

Examples:
    >>> import tempfile, torch
    >>> from tdrl.data import LazyTensorStorage, ReplayBuffer
    >>> rb = ReplayBuffer(storage=LazyTensorStorage(8))
    >>> _ = rb.extend(torch.arange(4.0))
    >>> root = Path(tempfile.mkdtemp())
    >>> rb.dumps(root / "ckpt")
    >>> case = {c.name: c for c in buffer_cases(root / "ckpt")}["truncate:storage/data/leaf0.memmap:half"]
    >>> case.mutate(root / "ckpt", root)
    >>> try:
    ...     ReplayBuffer(storage=LazyTensorStorage(8)).loads(root / "ckpt")
    ... except CheckpointError as err:
    ...     print("leaf0.memmap" in str(err))
    True
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import pickle
import shutil
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from tdrl.errors import CheckpointError

__all__ = ["MARKER", "HostileCase", "LoadAudit", "buffer_cases", "check_outcome", "train_cases"]

Mutation = Callable[[Path, Path], None]
MARKER = "PAYLOAD_RAN"


@dataclass(frozen=True)
class HostileCase:
    """A named mutation ``mutate(checkpoint_dir, outside_dir)`` applied to a checkpoint copy."""

    name: str
    mutate: Mutation


class _Payload:
    """Unpickling this runs a shell command that creates a marker file (never run by tdrl)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _payload(outside: Path) -> bytes:
    return pickle.dumps(_Payload(outside / MARKER))


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def _set_entry(meta: str, key: str, field: str, value: Any) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        obj = _json(root / meta)
        obj["entries"][key][field] = value
        _write_json(root / meta, obj)

    return mutate


def _set_key(file: str, key: str, value: Any, *, delete: bool = False) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        obj = _json(root / file)
        if delete:
            del obj[key]
        else:
            obj[key] = value
        _write_json(root / file, obj)

    return mutate


def _replace(file: str, content: Callable[[Path, Path], bytes]) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        (root / file).write_bytes(content(root / file, outside))

    return mutate


def _truncate(file: str, keep: float) -> Mutation:
    return _replace(file, lambda p, o: p.read_bytes()[: int(p.stat().st_size * keep)])


def _same_size_payload(p: Path, outside: Path) -> bytes:
    size = p.stat().st_size
    return (_payload(outside) * (size // 40 + 2))[:size]


def _plant(file: str, content: Callable[[Path], bytes]) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        (root / file).write_bytes(content(outside))

    return mutate


def _symlink_file(file: str) -> Mutation:
    """Replaces ``file`` by a link to an identical copy outside the folder."""

    def mutate(root: Path, outside: Path) -> None:
        target = outside / f"linked-{Path(file).name}"
        shutil.copyfile(root / file, target)
        (root / file).unlink()
        (root / file).symlink_to(target)

    return mutate


def _symlink_dir(folder: str) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        target = outside / f"linked-dir-{Path(folder).name or 'root'}"
        shutil.copytree(root / folder, target, symlinks=True)
        shutil.rmtree(root / folder)
        (root / folder).symlink_to(target, target_is_directory=True)

    return mutate


def _fifo(file: str) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        (root / file).unlink()
        os.mkfifo(root / file)

    return mutate


def _deep_json(levels: int) -> Callable[[Path, Path], bytes]:
    return lambda p, o: ("[" * levels + "]" * levels).encode()


def _deep_object(levels: int) -> Callable[[Path, Path], bytes]:
    return lambda p, o: ('{"format": ' * levels + "1" + "}" * levels).encode()


def _patch_float64(file: str, index: int, value: float) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        with open(root / file, "r+b") as f:
            f.seek(8 * index)
            f.write(struct.pack("<d", value))

    return mutate


def _generic_cases(files: list[str], metas: list[str]) -> list[HostileCase]:
    cases = []
    for f in files:
        cases.append(HostileCase(f"truncate:{f}:half", _truncate(f, 0.5)))
        cases.append(HostileCase(f"truncate:{f}:empty", _truncate(f, 0.0)))
    for f in metas:
        cases.append(HostileCase(f"pickle-as-json:{f}", _replace(f, lambda p, o: _payload(o))))
        cases.append(HostileCase(f"nul-bytes:{f}", _replace(f, lambda p, o: b"\0" * 64)))
        cases.append(HostileCase(f"deep-json:{f}", _replace(f, _deep_json(200_000))))
        cases.append(HostileCase(f"deep-object:{f}", _replace(f, _deep_object(500))))
        cases.append(HostileCase(f"not-utf8:{f}", _replace(f, lambda p, o: b"\xff\xfe{" * 8)))
        cases.append(HostileCase(f"json-list:{f}", _replace(f, lambda p, o: b"[1, 2, 3]")))
    return cases


def _rel(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def buffer_cases(root: Path) -> list[HostileCase]:
    """Hostile variants of the replay-buffer checkpoint folder ``root`` (a ``dumps`` output).

    The list depends on what the folder holds (a prioritized sampler's trees, an epoch
    permutation, a writer cursor): every file is truncated, every JSON file replaced by pickle,
    NUL bytes and deep JSON, and each component gets its own out-of-range states.
    """
    files = _rel(root)
    metas = [f for f in files if f.endswith(".json")]
    tensors = [f for f in files if f.endswith(".memmap")]
    data = sorted(f for f in tensors if f.startswith("storage/data/"))
    first = data[0]
    leaf_meta = f"{Path(first).parent.as_posix()}/meta.json"
    leaf = Path(first).stem
    cases = _generic_cases(files, metas)
    cases += [
        HostileCase("pickle-as-tensor:same-size", _replace(first, _same_size_payload)),
        HostileCase("pickle-as-tensor", _replace(first, lambda p, o: _payload(o))),
        HostileCase("planted-pkl", _plant("storage/data.pkl", _payload)),
        HostileCase("planted-pt", _plant("storage/data/obs.pt", _payload)),
        HostileCase("entry-points-to-pkl", _set_entry(leaf_meta, leaf, "file", "obs.pkl")),
        HostileCase("entry-type-pickle", _set_entry("storage/meta.json", "data", "type", "pickle")),
        HostileCase("dtype:float64", _set_entry(leaf_meta, leaf, "dtype", "float64")),
        HostileCase("dtype:object", _set_entry(leaf_meta, leaf, "dtype", "object")),
        HostileCase("dtype:list", _set_entry(leaf_meta, leaf, "dtype", ["float32"])),
        HostileCase("shape:negative", _set_entry(leaf_meta, leaf, "shape", [-1])),
        HostileCase("shape:float", _set_entry(leaf_meta, leaf, "shape", [1.5])),
        HostileCase("shape:string", _set_entry(leaf_meta, leaf, "shape", "40")),
        HostileCase("shape:huge", _set_entry(leaf_meta, leaf, "shape", [2**40, 2**40])),
        HostileCase("filled:huge", _set_entry("storage/meta.json", "filled", "value", 10**12)),
        HostileCase("filled:bool", _set_entry("storage/meta.json", "filled", "value", True)),
        HostileCase("len:huge", _set_key("buffer_metadata.json", "len", 10**15)),
        HostileCase("len:string", _set_key("buffer_metadata.json", "len", "40")),
        HostileCase("len:missing", _set_key("buffer_metadata.json", "len", None, delete=True)),
        HostileCase(
            "uninitialized-with-len", _set_entry("storage/meta.json", "initialized", "value", False)
        ),
        HostileCase(
            "env-shape:string", _set_entry("storage/meta.json", "env_shape", "value", "ab")
        ),
        HostileCase("version:2", _set_key("buffer_metadata.json", "version", 2)),
        HostileCase("components:other", _set_key("buffer_metadata.json", "components", {"x": 1})),
        HostileCase(
            "path:dotdot-file", _set_entry(leaf_meta, leaf, "file", "../../outside.memmap")
        ),
        HostileCase("path:absolute-file", _set_entry(leaf_meta, leaf, "file", "/etc/passwd")),
        HostileCase("path:dotdot-dir", _set_entry("meta.json", "storage", "dir", "..")),
        HostileCase("path:absolute-dir", _set_entry("meta.json", "storage", "dir", "/tmp")),
        HostileCase("path:nul", _set_entry(leaf_meta, leaf, "file", "obs\0.memmap")),
        HostileCase("path:missing-dir", _set_entry("meta.json", "sampler", "dir", "nowhere")),
        HostileCase("symlink:tensor", _symlink_file(first)),
        HostileCase("symlink:meta", _symlink_file("storage/meta.json")),
        HostileCase("symlink:header", _symlink_file("buffer_metadata.json")),
        HostileCase("symlink:folder", _symlink_dir("storage")),
        HostileCase("fifo:tensor", _fifo(first)),
        HostileCase("zeroed:tensor", _replace(first, lambda p, o: bytes(p.stat().st_size))),
    ]
    if "sampler/sumtree.memmap" in files:
        for name, value in (("nan", float("nan")), ("negative", -1.0), ("inf", float("inf"))):
            cases.append(
                HostileCase(f"priority:{name}", _patch_float64("sampler/sumtree.memmap", 0, value))
            )
        cases.append(
            HostileCase("priority:beyond-len", _both_trees_leaf(root, -1, 1.0)),
        )
        cases.append(
            HostileCase("priority:trees-disagree", _patch_float64("sampler/mintree.memmap", 1, 7.0))
        )
        cases.append(
            HostileCase("beta:nan", _set_entry("sampler/meta.json", "beta", "value", float("nan")))
        )
    if "sampler/perm.memmap" in files:
        cases.append(HostileCase("perm:out-of-range", _fill_int64("sampler/perm.memmap", 10**9)))
        cases.append(HostileCase("perm:negative", _fill_int64("sampler/perm.memmap", -5)))
        # In range but not a permutation: loads, then samples some elements twice, some never.
        cases.append(HostileCase("perm:zeros", _fill_int64("sampler/perm.memmap", 0)))
        cases.append(HostileCase("perm:repeated", _repeat_first_int64("sampler/perm.memmap")))
        cases.append(
            HostileCase("pos:huge", _set_entry("sampler/meta.json", "pos", "value", 10**9))
        )
    if "sampler/stamp.memmap" in files:
        cases.append(HostileCase("stamp:negative", _fill_int64("sampler/stamp.memmap", -7)))
        cases.append(
            HostileCase("clock:zero", _set_entry("sampler/meta.json", "clock", "value", 0))
        )
    if _entry_exists(root / "writer/meta.json", "cursor"):
        for bad in (10**9, -1, "3", None):
            cases.append(
                HostileCase(
                    f"cursor:{bad!r}", _set_entry("writer/meta.json", "cursor", "value", bad)
                )
            )
    return cases


def _entry_exists(meta: Path, key: str) -> bool:
    return meta.is_file() and key in _json(meta).get("entries", {})


def _fill_int64(file: str, value: int) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        size = (root / file).stat().st_size
        (root / file).write_bytes(struct.pack("<q", value) * (size // 8))

    return mutate


def _repeat_first_int64(file: str) -> Mutation:
    """Writes the first int64 of ``file`` over its second one."""

    def mutate(root: Path, outside: Path) -> None:
        raw = bytearray((root / file).read_bytes())
        raw[8:16] = raw[:8]
        (root / file).write_bytes(bytes(raw))

    return mutate


def _both_trees_leaf(root: Path, index: int, value: float) -> Mutation:
    """Sets a leaf of both trees past the stored elements (the trees stay consistent)."""
    capacity = _json(root / "buffer_metadata.json")["components"]["sampler"]["max_capacity"]
    slot = capacity - 1 if index < 0 else index

    def mutate(root: Path, outside: Path) -> None:
        for tree in ("sumtree", "mintree"):
            _patch_float64(f"sampler/{tree}.memmap", slot, value)(root, outside)

    return mutate


# ------------------------------------------------------------------------------ training


def _rehash(root: Path) -> None:
    meta = _json(root / "meta.json")
    meta["files"] = {
        name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in meta["files"]
    }
    _write_json(root / "meta.json", meta)


def _retensor(edit: Callable[[dict[str, torch.Tensor]], None]) -> Mutation:
    """Rewrites ``tensors.safetensors`` with ``edit`` applied, and updates its hash."""

    def mutate(root: Path, outside: Path) -> None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(root / "tensors.safetensors"))
        edit(tensors)
        save_file(tensors, str(root / "tensors.safetensors"))
        _rehash(root)

    return mutate


def _flip_byte(file: str) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        raw = bytearray((root / file).read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        (root / file).write_bytes(bytes(raw))

    return mutate


def _and_rehash(mutation: Mutation) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        mutation(root, outside)
        _rehash(root)

    return mutate


def _edit_meta(edit: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        meta = _json(root / "meta.json")
        edit(meta)
        _write_json(root / "meta.json", meta)

    return mutate


def _zero(tensors: dict[str, torch.Tensor], prefix: str) -> None:
    for k in tensors:
        if k.startswith(prefix):
            tensors[k] = torch.zeros_like(tensors[k])


def _drop_first(tensors: dict[str, torch.Tensor], prefix: str) -> None:
    del tensors[next(k for k in sorted(tensors) if k.startswith(prefix))]


def _reshape_first(tensors: dict[str, torch.Tensor], prefix: str) -> None:
    key = next(k for k in sorted(tensors) if k.startswith(prefix) and tensors[k].dim())
    tensors[key] = torch.zeros(tensors[key].numel() + 1)


def train_cases(root: Path) -> list[HostileCase]:
    """Hostile variants of the ``tdrl train`` checkpoint folder ``root`` (a ``ckpt-*`` folder)."""
    files = _rel(root)
    buffer_files = [f for f in files if f.startswith("buffer/")]
    cases = _generic_cases(["tensors.safetensors", "meta.json"], ["meta.json"])
    cases += [
        HostileCase(f"flip-byte:{f}", _flip_byte(f))
        for f in ["tensors.safetensors", *buffer_files[:6]]
    ]
    cases += [
        HostileCase("truncate+rehash:tensors", _and_rehash(_truncate("tensors.safetensors", 0.5))),
        HostileCase(
            "pickle+rehash:tensors",
            _and_rehash(_replace("tensors.safetensors", lambda p, o: _payload(o))),
        ),
        HostileCase("planted-pkl", _plant("model.pkl", _payload)),
        HostileCase("planted-pt", _plant("model.pt", _payload)),
        HostileCase("planted-pkl+listed", _and_rehash(_add_listed("model.pkl"))),
        HostileCase("symlink:tensors", _symlink_file("tensors.safetensors")),
        HostileCase("symlink:meta", _symlink_file("meta.json")),
        HostileCase("fifo:tensors", _fifo("tensors.safetensors")),
        HostileCase("zeroed-weights", _retensor(lambda t: _zero(t, "module/"))),
        HostileCase("wrong-shape:module", _retensor(lambda t: _reshape_first(t, "module/"))),
        HostileCase("wrong-shape:optimizer", _retensor(lambda t: _reshape_first(t, "optim/"))),
        HostileCase(
            "missing:module-tensor",
            _retensor(lambda t: _drop_first(t, "module/")),
        ),
        HostileCase("rng:float", _retensor(lambda t: t.update({"rng/torch": torch.zeros(3)}))),
        HostileCase(
            "rng:short",
            _retensor(lambda t: t.update({"rng/torch": torch.zeros(3, dtype=torch.uint8)})),
        ),
        HostileCase(
            "rng:numpy", _edit_meta(lambda m: m["rng"].update({"numpy": ["MT19937", [1, 2]]}))
        ),
        HostileCase(
            "rng:python", _edit_meta(lambda m: m["rng"].update({"python": [3, "x", None]}))
        ),
        HostileCase("rng:missing", _edit_meta(lambda m: m.pop("rng"))),
        HostileCase(
            "hash:wrong-type", _edit_meta(lambda m: m["files"].update({"tensors.safetensors": 7}))
        ),
        HostileCase(
            "hash:dotdot", _edit_meta(lambda m: m["files"].update({"../outside": "0" * 64}))
        ),
        HostileCase(
            "hash:absolute", _edit_meta(lambda m: m["files"].update({"/etc/passwd": "0" * 64}))
        ),
        HostileCase("hash:missing", _edit_meta(lambda m: m.pop("files"))),
        HostileCase("format:other", _edit_meta(lambda m: m.update({"format": "x"}))),
        HostileCase("frames:string", _edit_meta(lambda m: m.update({"frames": "10"}))),
        HostileCase("frames:negative", _edit_meta(lambda m: m.update({"frames": -1}))),
        HostileCase("optimizers:missing", _edit_meta(lambda m: m.pop("optimizers"))),
        HostileCase("optimizers:list", _edit_meta(lambda m: m.update({"optimizers": []}))),
        HostileCase("optimizer:lr-string", _edit_meta(_set_lr("fast"))),
        HostileCase("optimizer:extra-param", _edit_meta(_extra_param_state)),
        HostileCase("counters:missing", _edit_meta(lambda m: m.pop("counters"))),
        HostileCase(
            "counters:garbage", _edit_meta(lambda m: m.update({"counters": {"iteration": "x"}}))
        ),
        HostileCase(
            "counters:huge", _edit_meta(lambda m: m["counters"].update({"iteration": 1e400}))
        ),
        HostileCase("meta:missing", lambda r, o: (r / "meta.json").unlink()),
        HostileCase("tensors:missing", lambda r, o: (r / "tensors.safetensors").unlink()),
    ]
    if buffer_files:
        cases += [
            HostileCase("symlink:buffer", _symlink_dir("buffer")),
            HostileCase(
                "buffer:len+rehash",
                _and_rehash(_set_key("buffer/buffer_metadata.json", "len", 10**6)),
            ),
            HostileCase(
                "buffer:deep+rehash", _and_rehash(_replace("buffer/meta.json", _deep_json(100_000)))
            ),
        ]
    return cases


def _add_listed(name: str) -> Mutation:
    def mutate(root: Path, outside: Path) -> None:
        (root / name).write_bytes(_payload(outside))
        meta = _json(root / "meta.json")
        meta["files"][name] = ""
        _write_json(root / "meta.json", meta)

    return mutate


def _set_lr(value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(meta: dict[str, Any]) -> None:
        for opt in meta["optimizers"].values():
            opt["param_groups"][0]["lr"] = value

    return edit


def _extra_param_state(meta: dict[str, Any]) -> None:
    for opt in meta["optimizers"].values():
        opt["state"]["999"] = {"step": 1}


# ------------------------------------------------------------------------------ audit


class LoadAudit:
    """Records, while active, pickle/exec/process audit events and file opens outside ``root``.

    Python audit hooks cannot be removed, so one hook is installed on first use and only records
    while an audit is active. Opens are judged by their real path (links resolved), so a read
    through a link that leaves the folder is caught even if the path looks inside.

    The cyclic garbage collector is paused while an audit is active: a finalizer of an unrelated
    object (a freed memmap storage removing its own temporary folder) run by a collection that
    happens to fall inside the load would otherwise be recorded as the load's open. Nothing is
    collected up front (a full collection per audit made the hostile suites minutes slower).
    """

    _active: ClassVar[LoadAudit | None] = None
    _installed: ClassVar[bool] = False
    _EVENTS = (
        "pickle.find_class",
        "exec",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
    )

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.events: list[tuple[str, str]] = []
        self._gc_was_enabled = False

    @classmethod
    def _hook(cls, event: str, args: tuple[Any, ...]) -> None:
        audit = cls._active
        if audit is None:
            return
        if event in cls._EVENTS:
            audit.events.append((event, repr(args)[:200]))
        elif (
            event in ("open", "os.scandir", "os.listdir")
            and args
            and isinstance(args[0], (str, bytes, os.PathLike))
        ):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path != audit.root and not path.startswith(audit.root + os.sep):
                audit.events.append((f"{event} outside", path))

    def __enter__(self) -> LoadAudit:
        if not LoadAudit._installed:
            sys.addaudithook(LoadAudit._hook)
            LoadAudit._installed = True
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        LoadAudit._active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        LoadAudit._active = None
        if self._gc_was_enabled:
            gc.enable()


def check_outcome(error: BaseException | None, root: Path) -> str | None:
    """``None`` if a load's outcome is acceptable (success, or a CheckpointError naming a file
    under ``root``), else what is wrong."""
    if error is None:
        return None
    if not isinstance(error, CheckpointError):
        return f"raised {type(error).__name__}: {error}"
    if str(root) not in str(error):
        return f"CheckpointError does not name the checkpoint ({error})"
    return None
