"""``--resume`` continues exactly on the built-in envs: a run killed at any iteration and
resumed from its newest checkpoint writes the same metrics rows (wall-clock columns aside) and
ends with the same weights as a run never stopped with the same seed. The checkpoints hold
what makes that so: the envs' states and generators, the collector's next step, unfinished
episodes' returns, the target updater's step count (tdrl/train/_resume.py)."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from safetensors.torch import load_file

from tdrl.train import latest_checkpoint, load_config
from tdrl.train.cli import make_trainer

pytestmark = pytest.mark.timeout(120)

_OFF = [
    "buffer.batch_size=16",
    "model.hidden=[16, 16]",
    "eval.episodes=2",
]
CASES = {
    # preset: (overrides, frame after which the first run dies)
    "ppo": (
        [
            "frames=768",
            "num_envs=4",
            "collector.frames_per_batch=128",
            "loss.epochs=2",
            "loss.minibatch_size=64",
            "model.hidden=[16]",
            "eval.every_frames=256",
            "eval.episodes=2",
            "logging.checkpoint_every_frames=256",
        ],
        640,
    ),
    "a2c": (
        [
            "frames=384",
            "num_envs=4",
            "collector.frames_per_batch=64",
            "model.hidden=[16]",
            "eval.every_frames=128",
            "eval.episodes=2",
            "logging.checkpoint_every_frames=128",
        ],
        192,
    ),
    "dqn": (  # killed while HardUpdate is between two copies, and the eps annealing goes on
        [
            "frames=448",
            "num_envs=4",
            "collector.frames_per_batch=64",
            "collector.init_random_frames=128",
            "target.hard_update_interval=20",
            "eval.every_frames=128",
            "logging.checkpoint_every_frames=128",
            *_OFF,
        ],
        320,
    ),
    "sac": (
        [
            "frames=320",
            "collector.frames_per_batch=40",
            "collector.init_random_frames=80",
            "eval.every_frames=120",
            "logging.checkpoint_every_frames=120",
            *_OFF,
        ],
        200,
    ),
    "td3": (
        [
            "frames=240",
            "collector.frames_per_batch=40",
            "collector.init_random_frames=40",
            "eval.every_frames=80",
            "logging.checkpoint_every_frames=80",
            *_OFF,
        ],
        120,
    ),
    "mappo": (
        [
            "env=Navigation",
            "num_envs=2",
            "frames=320",
            "collector.frames_per_batch=64",
            "eval.every_frames=128",
            "eval.episodes=2",
            "logging.checkpoint_every_frames=128",
            "env_options.max_steps=16",
            "model.hidden=[16]",
            "loss.epochs=1",
            "loss.minibatch_size=64",
        ],
        192,
    ),
}


class Killed(Exception):
    pass


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k not in ("time", "fps")} for r in csv.DictReader(f)]


def _weights(run_dir):
    tensors = load_file(str(latest_checkpoint(run_dir) / "tensors.safetensors"))
    return {k: v for k, v in tensors.items() if k.startswith("module/")}


@pytest.mark.parametrize("preset", sorted(CASES))
def test_a_killed_and_resumed_run_matches_an_uninterrupted_one(tmp_path, preset):
    overrides, kill_at = CASES[preset]
    config = load_config(preset, overrides=overrides)
    make_trainer(config, tmp_path / "whole", quiet=True).run()

    cut = tmp_path / "cut"
    first = make_trainer(config, cut, quiet=True)
    original = first._after_iteration

    def dying(batch, losses, frames):
        original(batch, losses, frames)
        if first.frames >= kill_at:
            raise Killed  # a crash: the rows after the newest checkpoint are written again

    first._after_iteration = dying
    with pytest.raises(Killed):
        first.run()
    assert int(latest_checkpoint(cut).name.split("-")[1]) < kill_at
    saved = json.loads((cut / "config.json").read_text())
    make_trainer(saved, cut, quiet=True, resume=True).run()

    assert _rows(cut) == _rows(tmp_path / "whole")
    a, b = _weights(tmp_path / "whole"), _weights(cut)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
