"""SliceSamplerWithoutReplacement: TorchRL's epochs over trajectories, one slice per trajectory."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers import SliceSamplerWithoutReplacement as DeepPath
from tdrl.errors import CheckpointError

LENGTHS = [6, 7, 5, 8, 6, 9, 5]  # 7 trajectories


def _data(lengths=LENGTHS):
    traj = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    n = traj.numel()
    return TensorDict(
        {"traj": traj, "t": step, "is_init": (step == 0).unsqueeze(-1), "obs": torch.randn(n, 2)},
        [n],
    )


def _buffer(sampler, batch_size, capacity=100, seed=0):
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
    )


def _slices(batch, slice_len):
    """Splits a batch at its truncated marks; checks each slice is consecutive steps of one
    trajectory."""
    ends = batch["next", "truncated"].squeeze(-1).nonzero().squeeze(-1).tolist()
    out, begin = [], 0
    for end in ends:
        piece = batch[begin : end + 1]
        assert (piece["traj"] == piece["traj"][0]).all()
        assert (piece["t"].diff() == 1).all()
        assert piece.numel() <= slice_len
        out.append(piece)
        begin = end + 1
    assert begin == batch.numel()
    return out


def test_an_epoch_visits_every_trajectory_once():
    sampler = SliceSamplerWithoutReplacement(num_slices=3, traj_key="traj")
    rb = _buffer(sampler, batch_size=9)  # 3 slices of 3 steps
    rb.extend(_data())
    for _ in range(4):  # several epochs
        batches = list(rb)
        assert len(batches) == math.ceil(len(LENGTHS) / 3)
        seen = []
        for batch in batches:
            trajs = [int(s["traj"][0]) for s in _slices(batch, 3)]
            assert len(set(trajs)) == len(trajs)  # never two slices of one trajectory
            seen += trajs
        assert sorted(seen) == list(range(len(LENGTHS)))
        assert [b.numel() for b in batches] == [9, 9, 3]
        assert sampler.ran_out


def test_drop_last_skips_the_leftover_trajectories():
    sampler = SliceSamplerWithoutReplacement(slice_len=2, traj_key="traj", drop_last=True)
    rb = _buffer(sampler, batch_size=6)  # 3 slices
    rb.extend(_data())
    for _ in range(3):
        batches = list(rb)
        assert [b.numel() for b in batches] == [6, 6]  # 7 // 3 full batches
        trajs = [int(s["traj"][0]) for b in batches for s in _slices(b, 2)]
        assert len(set(trajs)) == 6


def test_without_shuffle_trajectories_come_in_storage_order():
    sampler = SliceSamplerWithoutReplacement(slice_len=2, traj_key="traj", shuffle=False)
    rb = _buffer(sampler, batch_size=4)
    rb.extend(_data())
    order = [int(s["traj"][0]) for b in rb for s in _slices(b, 2)]
    assert order == list(range(len(LENGTHS)))


def test_slice_starts_are_uniform_inside_a_trajectory():
    sampler = SliceSamplerWithoutReplacement(slice_len=3, traj_key="traj")
    rb = _buffer(sampler, batch_size=3)
    rb.extend(_data([6, 6]))  # 4 windows per trajectory
    counts = torch.zeros(4)
    for _ in range(2000):
        counts[int(rb.sample()["t"][0])] += 1
    assert torch.allclose(counts / counts.sum(), torch.full((4,), 0.25), atol=0.04)


def test_short_trajectories_take_their_place_but_give_no_strict_slice():
    strict = SliceSamplerWithoutReplacement(slice_len=3, traj_key="traj", shuffle=False)
    rb = _buffer(strict, batch_size=9)
    rb.extend(_data([5, 2, 5]))
    batch = rb.sample()
    assert [int(s["traj"][0]) for s in _slices(batch, 3)] == [0, 2]
    assert strict.ran_out
    loose = SliceSamplerWithoutReplacement(
        slice_len=3, traj_key="traj", shuffle=False, strict_length=False
    )
    rb = _buffer(loose, batch_size=9)
    rb.extend(_data([5, 2, 5]))
    pieces = _slices(rb.sample(), 3)
    assert [p.numel() for p in pieces] == [3, 2, 3]
    assert pieces[1]["t"].tolist() == [0, 1]


def test_slice_starts_are_marked_as_init():
    sampler = SliceSamplerWithoutReplacement(slice_len=3, traj_key="traj")
    rb = _buffer(sampler, batch_size=6)
    data = _data()
    data["is_init"] = torch.zeros(data.numel(), 1, dtype=torch.bool)
    rb.extend(data)
    batch = rb.sample()
    assert batch["is_init"].squeeze(-1).tolist() == [True, False, False] * 2


def test_end_key_finds_the_same_trajectories():
    data = _data()
    data["next", "done"] = torch.cat([data["traj"][1:] != data["traj"][:-1], torch.tensor([True])])
    data["next", "done"] = data["next", "done"].unsqueeze(-1)
    sampler = SliceSamplerWithoutReplacement(num_slices=7)
    rb = _buffer(sampler, batch_size=14)
    rb.extend(data)
    trajs = sorted(int(s["traj"][0]) for s in _slices(rb.sample(), 2))
    assert trajs == list(range(7)) and sampler.ran_out


def test_a_write_starts_a_new_epoch():
    sampler = SliceSamplerWithoutReplacement(slice_len=2, traj_key="traj")
    rb = _buffer(sampler, batch_size=6)
    rb.extend(_data())
    rb.sample()
    more = _data([4, 4])
    more["traj"] += 10
    rb.extend(more)
    trajs = [int(s["traj"][0]) for b in rb for s in _slices(b, 2)]
    assert sorted(trajs) == [*range(7), 10, 11]


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
        SliceSamplerWithoutReplacement(num_slices=2, slice_len=2)
    with pytest.raises(ValueError, match="ends is not supported"):
        SliceSamplerWithoutReplacement(slice_len=2, ends=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="trajectories is not supported"):
        SliceSamplerWithoutReplacement(slice_len=2, trajectories=torch.zeros(3))
    rb = _buffer(SliceSamplerWithoutReplacement(slice_len=2, traj_key="traj", drop_last=True), 20)
    rb.extend(_data())
    with pytest.raises(
        ValueError, match=r"not enough trajectories .*\(got 7; expected at least num_slices=10\)"
    ):
        rb.sample()
    with pytest.raises(ValueError, match="not a multiple of slice_len"):
        rb.sample(5)
    rb = _buffer(SliceSamplerWithoutReplacement(slice_len=20, traj_key="traj"), 20)
    rb.extend(_data())
    with pytest.raises(ValueError, match="no trajectory is long enough"):
        rb.sample()
    only_short = SliceSamplerWithoutReplacement(slice_len=4, traj_key="traj", shuffle=False)
    rb = _buffer(only_short, 4)  # one slice per batch: the second trajectory is too short
    rb.extend(_data([5, 2]))
    rb.sample()
    with pytest.raises(ValueError, match="every trajectory of this batch is shorter"):
        rb.sample()


def test_signature_matches_torchrl():
    assert DeepPath is SliceSamplerWithoutReplacement
    assert issubclass(SliceSamplerWithoutReplacement, SliceSampler)
    with pytest.raises(TypeError):
        SliceSamplerWithoutReplacement(2)  # keyword-only, as in TorchRL
    sampler = SliceSamplerWithoutReplacement(slice_len=2, compile=True, use_gpu=False)
    assert (sampler.drop_last, sampler.shuffle, sampler.strict_length) == (False, True, True)


def test_dumps_loads_continues_the_epoch(tmp_path):
    original = _buffer(SliceSamplerWithoutReplacement(num_slices=2, traj_key="traj"), 6)
    original.extend(_data())
    original.sample()
    original.dumps(tmp_path / "rb")
    loaded = _buffer(SliceSamplerWithoutReplacement(num_slices=2, traj_key="traj"), 6, seed=5)
    loaded.loads(tmp_path / "rb")
    rest = [b["index"].tolist() for b in original]
    assert rest and [b["index"].tolist() for b in loaded] == rest
    assert len(rest) == 3  # 7 trajectories, 2 per batch, one batch taken before the dump


def test_state_dict_round_trip_and_refusals():
    sampler = SliceSamplerWithoutReplacement(num_slices=2, traj_key="traj")
    rb = _buffer(sampler, 4)
    rb.extend(_data())
    rb.sample()
    state = sampler.state_dict()
    other = SliceSamplerWithoutReplacement(num_slices=2, traj_key="traj")
    other.load_state_dict(state)
    assert torch.equal(other.state_dict()["perm"], state["perm"])
    assert other.state_dict()["epoch_key"] == state["epoch_key"]
    bad = {**state, "perm": torch.full_like(state["perm"], 99)}
    with pytest.raises(CheckpointError, match="not a permutation"):
        other.load_state_dict(bad)
    longer = {**state, "perm": torch.arange(state["perm"].numel() + 3)}
    with pytest.raises(CheckpointError, match="permutation points outside"):
        other.load_state_dict(longer)
    with pytest.raises(CheckpointError, match="invalid epoch key"):
        other.load_state_dict({**state, "epoch_key": "x"})
    wrong = _buffer(
        SliceSamplerWithoutReplacement(num_slices=2, traj_key="traj", drop_last=True), 4
    )
    with pytest.raises(CheckpointError):
        wrong.load_state_dict(rb.state_dict())
