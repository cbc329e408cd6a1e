"""PrioritizedSliceSampler: slice starts drawn by priority, slices inside one trajectory."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    SliceSampler,
    TensorDictReplayBuffer,
)
from tdrl.data.replay_buffers.samplers import PrioritizedSliceSampler as DeepPath
from tdrl.errors import CheckpointError


def _data(lengths, first=0):
    traj = torch.cat([torch.full((n,), first + i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    return TensorDict(
        {"traj": traj, "t": step, "is_init": torch.zeros(traj.numel(), 1, dtype=torch.bool)},
        [traj.numel()],
    )


def _buffer(sampler, batch_size, capacity=40, seed=0):
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
    )


def _sampler(capacity=40, **kwargs):
    kwargs.setdefault("slice_len", 3)
    return PrioritizedSliceSampler(capacity, 1.0, 1.0, eps=0.0, traj_key="traj", **kwargs)


def _check_slices(batch, slice_len):
    pieces = batch.reshape(-1, slice_len)
    assert (pieces["traj"] == pieces["traj"][:, :1]).all()
    assert (pieces["t"].diff(dim=1) == 1).all()
    return pieces


def test_slice_starts_follow_the_priorities():
    sampler = _sampler()
    rb = _buffer(sampler, batch_size=3 * 4000)
    index = rb.extend(_data([10, 10]))
    priority = torch.zeros(20)
    priority[2], priority[15] = 1.0, 3.0  # trajectory 0 step 2, trajectory 1 step 5
    sampler.update_priority(index, priority)
    pieces = _check_slices(rb.sample(), 3)
    start = pieces["index"][:, 0]
    assert set(start.tolist()) == {2, 15}
    assert abs(float((start == 15).float().mean()) - 0.75) < 0.03
    assert pieces["t"][start == 15].tolist()[0] == [5, 6, 7]


def test_steps_near_a_trajectory_end_never_start_a_strict_slice():
    sampler = _sampler()
    rb = _buffer(sampler, batch_size=3 * 2000)
    index = rb.extend(_data([10, 6]))
    priority = torch.full((16,), 0.01)
    priority[[8, 9, 14, 15]] = 100.0  # the last two steps of each trajectory
    sampler.update_priority(index, priority)
    pieces = _check_slices(rb.sample(), 3)
    assert not set(pieces["index"][:, 0].tolist()) & {8, 9, 14, 15}
    assert int(pieces["t"][:, 0].max()) <= 7


def test_loose_slices_start_at_short_trajectories_and_stop_at_their_end():
    sampler = _sampler(slice_len=4, strict_length=False)
    rb = _buffer(sampler, batch_size=4 * 500)
    index = rb.extend(_data([10, 2]))
    priority = torch.zeros(12)
    priority[[10, 11]] = 1.0  # both steps of the short trajectory
    sampler.update_priority(index, priority)
    batch = rb.sample()
    # Only its first step can start a slice, which holds the whole trajectory (2 steps).
    assert batch.numel() == 2 * 500
    assert batch["t"].tolist() == [0, 1] * 500
    assert batch["next", "truncated"].squeeze(-1).tolist() == [False, True] * 500


def test_priority_weight_is_the_start_weight_repeated_over_the_slice():
    alpha, beta, eps = 0.5, 0.7, 0.1
    sampler = PrioritizedSliceSampler(40, alpha, beta, eps, slice_len=2, traj_key="traj")
    rb = _buffer(sampler, batch_size=2 * 200)
    index = rb.extend(_data([5, 5]))
    priority = torch.arange(10, dtype=torch.float32)
    sampler.update_priority(index, priority)
    pieces = _check_slices(rb.sample(), 2)
    weight = (priority.double() + eps) ** alpha
    start = pieces["index"][:, 0]
    expected = (weight[start] / weight.min()) ** (-beta)
    assert torch.allclose(pieces["priority_weight"][:, 0].double(), expected, rtol=1e-5)
    assert torch.equal(pieces["priority_weight"][:, 0], pieces["priority_weight"][:, 1])


def test_update_tensordict_priority_moves_the_starts():
    sampler = PrioritizedSliceSampler(40, 1.0, 1.0, 0.0, slice_len=2, traj_key="traj")
    rb = _buffer(sampler, batch_size=2 * 50)
    rb.extend(_data([6, 6]))
    sample = rb.sample()
    sample["td_error"] = torch.where(sample["index"] == int(sample["index"][0]), 5.0, 0.0)
    rb.update_tensordict_priority(sample)
    start = _check_slices(rb.sample(), 2)["index"][:, 0]
    assert set(start.tolist()) == {int(sample["index"][0])}


def test_trajectories_wrapping_around_the_ring_stay_whole():
    sampler = _sampler(capacity=12, slice_len=4)
    rb = _buffer(sampler, batch_size=4 * 200, capacity=12)
    rb.extend(_data([8]))
    rb.extend(_data([8], first=1))  # wraps: stored at slots 8..11 then 0..3
    pieces = _check_slices(rb.sample(), 4)
    assert set(pieces["traj"][:, 0].tolist()) <= {0, 1}
    # trajectory 0 keeps steps 4..7 (slots 4..7): one slice start; trajectory 1 has 5.
    starts = {(int(p["traj"][0]), int(p["t"][0])) for p in pieces}
    assert starts <= {(0, 4), *((1, s) for s in range(5))}
    assert (1, 1) in starts and (1, 4) in starts


def test_slice_starts_are_marked_as_init_and_slice_len_one_works():
    sampler = _sampler(slice_len=3)
    rb = _buffer(sampler, batch_size=6)
    rb.extend(_data([10]))
    assert rb.sample()["is_init"].squeeze(-1).tolist() == [True, False, False] * 2
    single = _sampler(slice_len=1)
    rb = _buffer(single, batch_size=400)
    rb.extend(_data([4, 4]))
    assert set(rb.sample()["index"].tolist()) == set(range(8))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="span is not supported"):
        PrioritizedSliceSampler(10, 0.6, 0.4, slice_len=2, span=True)
    with pytest.raises(ValueError, match="max_priority_within_buffer=True is not supported"):
        PrioritizedSliceSampler(10, 0.6, 0.4, slice_len=2, max_priority_within_buffer=True)
    with pytest.raises(ValueError, match="invalid alpha"):
        PrioritizedSliceSampler(10, -1.0, 0.4, slice_len=2)
    with pytest.raises(ValueError, match="exactly one of num_slices and slice_len"):
        PrioritizedSliceSampler(10, 0.6, 0.4)
    with pytest.raises(ValueError, match="max_capacity is smaller"):
        _buffer(PrioritizedSliceSampler(10, 0.6, 0.4, slice_len=2), 4, capacity=20)
    rb = _buffer(_sampler(slice_len=20), 20)
    rb.extend(_data([5, 5]))
    with pytest.raises(ValueError, match="no trajectory is long enough"):
        rb.sample()
    sampler = _sampler()
    rb = _buffer(sampler, 3)
    index = rb.extend(_data([5]))
    priority = torch.zeros(5)
    priority[4] = 1.0  # only a step that cannot start a slice
    sampler.update_priority(index, priority)
    with pytest.raises(ValueError, match="no step that can start a slice has a positive weight"):
        rb.sample()
    assert float(sampler.weights(torch.tensor([4]))) == 1.0  # the masked weight came back


def test_signature_matches_torchrl():
    assert DeepPath is PrioritizedSliceSampler
    sampler = PrioritizedSliceSampler(20, 0.6, 0.4, 1e-6, torch.float32, "mean", slice_len=2)
    assert isinstance(sampler, SliceSampler) and isinstance(sampler, PrioritizedSampler)
    assert (sampler.max_capacity, sampler.alpha, sampler.beta, sampler.eps) == (20, 0.6, 0.4, 1e-6)
    assert sampler.reduction == "mean" and sampler.strict_length
    with pytest.raises(TypeError):
        PrioritizedSliceSampler(20, 0.6, 0.4, 1e-6, torch.float32, "max", 2)  # num_slices kw-only


def test_dumps_loads_round_trip(tmp_path):
    original = _buffer(_sampler(), 6)
    index = original.extend(_data([10, 10]))
    original.sampler.update_priority(index, torch.arange(20.0))
    original.dumps(tmp_path / "rb")
    loaded = _buffer(_sampler(), 6, seed=3)
    loaded.loads(tmp_path / "rb")
    assert torch.equal(loaded.sampler.weights(index), original.sampler.weights(index))
    for _ in range(3):
        assert torch.equal(loaded.sample()["index"], original.sample()["index"])
    state = original.sampler.state_dict()
    bad = {**state, "stamp": torch.full_like(state["stamp"], -3)}
    probe = _sampler()
    probe.load_state_dict(bad)
    with pytest.raises(CheckpointError, match="write order does not cover"):
        probe.check_fits(20, 20, "probe")
    other = _buffer(SliceSampler(slice_len=3, traj_key="traj"), 6)
    with pytest.raises(CheckpointError):
        other.loads(tmp_path / "rb")
