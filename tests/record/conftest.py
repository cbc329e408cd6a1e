"""Readers shared by the record tests: decoded videos and offline W&B runs."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def _decode_mp4(path: str | Path) -> np.ndarray:
    """Every frame of an MP4 file as uint8 ``[T, H, W, 3]`` (PyAV)."""
    import av

    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames)


def _decode_gif(data: bytes | str | Path) -> np.ndarray:
    """Every frame of a GIF as uint8 ``[T, H, W, 3]`` (Pillow)."""
    import io

    from PIL import Image, ImageSequence

    source = io.BytesIO(data) if isinstance(data, bytes) else str(data)
    with Image.open(source) as image:
        return np.stack([np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(image)])


_BLOCK = 32768
_HEADER = 7  # ":W&B" magic, 0xBEE1, version


def wandb_records(run_dir: Path) -> list[Any]:
    """The protobuf records of an offline W&B run (its ``run-<id>.wandb`` file: a LevelDB-style
    log of 32 kB blocks of ``crc32, length (u16), type (u8), data`` chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    raw = path.read_bytes()
    assert raw[:4] == b":W&B"
    records, pending, pos = [], b"", _HEADER
    while pos + 7 <= len(raw):
        room = _BLOCK - pos % _BLOCK
        if room < 7:  # the block's tail is padding
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0
            continue
        pending += data
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(run_dir: Path) -> list[dict[str, Any]]:
    """The history rows of an offline W&B run, in order (``{key: value}``)."""
    rows = []
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows


def wandb_config(run_dir: Path) -> dict[str, Any]:
    """The run's config after every update (``{key: value}``)."""
    config: dict[str, Any] = {}
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "config":
            for item in record.config.update:
                key = item.key or "/".join(item.nested_key)
                config[key] = json.loads(item.value_json)
    return config


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    """W&B in offline mode, writing nothing outside ``tmp_path``."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


@pytest.fixture
def decode_mp4():
    """``decode_mp4(path)``: the frames of an MP4 file, uint8 ``[T, H, W, 3]``."""
    return _decode_mp4


@pytest.fixture
def decode_gif():
    """``decode_gif(bytes or path)``: the frames of a GIF, uint8 ``[T, H, W, 3]``."""
    return _decode_gif


@pytest.fixture
def wandb_run():
    """Readers of an offline W&B run folder: ``.history(dir)``, ``.config(dir)``."""

    class Reader:
        history = staticmethod(wandb_history)
        config = staticmethod(wandb_config)

    return Reader
