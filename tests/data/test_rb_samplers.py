"""Uniform samplers, trajectory slices and writers."""

from __future__ import annotations

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
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
)

SAMPLERS = {
    "random": RandomSampler,
    "without_replacement": SamplerWithoutReplacement,
    "prioritized": lambda: PrioritizedSampler(20, 0.6, 0.4),
    "slice": lambda: SliceSampler(slice_len=2, traj_key="traj"),
}


@pytest.mark.parametrize("name", SAMPLERS)
def test_sampling_an_empty_buffer_raises(name):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20), sampler=SAMPLERS[name](), batch_size=4
    )
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample()


def test_random_sampler_is_uniform_and_reproducible():
    def draw(seed):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(10), generator=torch.Generator().manual_seed(seed)
        )
        rb.extend(torch.arange(5))
        return rb.sample(20_000)

    a, b = draw(3), draw(3)
    assert torch.equal(a, b) and not torch.equal(a, draw(4))
    counts = torch.bincount(a, minlength=5).double()
    assert ((counts - 4000).abs() < 300).all()  # ~5 standard deviations


@pytest.mark.parametrize("shuffle", [True, False])
def test_without_replacement_visits_each_element_once(shuffle):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SamplerWithoutReplacement(shuffle=shuffle),
        batch_size=4,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(torch.arange(10))
    batches = list(rb)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert (torch.cat(batches).tolist() == list(range(10))) is not shuffle
    # The next epoch starts over and sees elements written since.
    rb.extend(torch.arange(10, 12))
    assert sorted(torch.cat(list(rb)).tolist()) == list(range(12))


def test_without_replacement_drop_last():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=4,
    )
    rb.extend(torch.arange(10))
    batches = list(rb)
    assert [len(b) for b in batches] == [4, 4]
    with pytest.raises(ValueError, match="not enough elements"):
        rb.sample(11)


def make_traj_data(n_env: int, steps: int, lengths: list[int], close: bool = False) -> TensorDict:
    """[n_env, steps] data; env e runs trajectories of the given lengths cyclically (``close``:
    the last trajectory of every env is marked done)."""
    traj = torch.empty(n_env, steps, dtype=torch.long)
    done = torch.zeros(n_env, steps, dtype=torch.bool)
    next_id = 0
    for e in range(n_env):
        t = 0
        k = e
        while t < steps:
            length = lengths[k % len(lengths)]
            traj[e, t : t + length] = next_id
            done[e, min(t + length, steps) - 1] = t + length <= steps or close
            next_id, t, k = next_id + 1, t + length, k + 1
    step = torch.arange(steps).expand(n_env, steps)
    env = torch.arange(n_env).unsqueeze(1).expand(n_env, steps)
    return TensorDict(
        {"traj": traj, "step": step, "env": env, "next": {"done": done.unsqueeze(-1)}},
        [n_env, steps],
    )


def check_slices(sample: TensorDict, slice_len: int) -> None:
    s = sample.reshape(-1, slice_len)
    assert (s["traj"] == s["traj"][:, :1]).all(), "a slice spans two trajectories"
    assert (s["env"] == s["env"][:, :1]).all()
    assert (s["step"].diff(dim=1) == 1).all(), "a slice is not consecutive in time"


# End flags cannot separate trajectories interleaved step by step (flat, time-major): that layout
# needs traj_key, so the combination is not generated.
@pytest.mark.parametrize(
    ("layout", "key"),
    [
        ("env_time", "traj_key"),
        ("env_time", "end_key"),
        ("flat_env_major", "traj_key"),
        ("flat_env_major", "end_key"),
        ("flat_time_major", "traj_key"),
    ],
)
def test_slices_stay_inside_interleaved_trajectories(layout, key):
    # Flattened env after env, end flags only work for complete trajectories.
    close = key == "end_key" and layout == "flat_env_major"
    data = make_traj_data(n_env=4, steps=30, lengths=[5, 9, 3, 12], close=close)
    if layout == "env_time":
        storage = LazyTensorStorage(200, ndim=2)
    else:
        storage = LazyTensorStorage(200)
        data = data.reshape(-1) if layout == "flat_env_major" else data.transpose(0, 1).reshape(-1)
    sampler = SliceSampler(slice_len=4, **({"traj_key": "traj"} if key == "traj_key" else {}))
    rb = TensorDictReplayBuffer(
        storage=storage, sampler=sampler, batch_size=64, generator=torch.Generator().manual_seed(0)
    )
    rb.extend(data)
    seen = set()
    for _ in range(20):
        sample = rb.sample()
        check_slices(sample, 4)
        seen |= set(sample["traj"].tolist())
    long_enough = {t for t in data["traj"].unique().tolist() if (data["traj"] == t).sum() >= 4}
    assert seen == long_enough


def test_slices_across_ring_wrap():
    """Trajectories that wrap around the end of the ring buffer stay in time order."""
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(25),
        sampler=SliceSampler(num_slices=8, end_key=("next", "done")),
        batch_size=40,
        generator=torch.Generator().manual_seed(0),
    )
    for chunk in range(4):  # 4 x 10 steps into 25 slots: wraps, overwrites the oldest
        step = torch.arange(chunk * 10, chunk * 10 + 10)
        data = TensorDict(
            {
                "traj": step // 7,
                "step": step,
                "env": torch.zeros(10, dtype=torch.long),
                "next": {"done": (step % 7 == 6).unsqueeze(-1)},
            },
            [10],
        )
        rb.extend(data)
    for _ in range(10):
        check_slices(rb.sample(), 5)


def test_slice_strict_length_false_and_errors():
    data = TensorDict(
        {
            "traj": torch.tensor([0, 0, 1, 1, 1, 1, 1]),
            "step": torch.tensor([0, 1, 0, 1, 2, 3, 4]),
            "env": torch.zeros(7, dtype=torch.long),
        },
        [7],
    )
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SliceSampler(slice_len=3, traj_key="traj", strict_length=False),
        batch_size=30,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(data)
    sample = rb.sample()
    assert len(sample) < 30 and (sample["traj"] == 0).any()
    strict = TensorDictReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SliceSampler(slice_len=6, traj_key="traj"),
        batch_size=12,
    )
    strict.extend(data)
    with pytest.raises(ValueError, match="no trajectory is long enough"):
        strict.sample()
    with pytest.raises(ValueError, match="multiple of slice_len"):
        strict.sample(13)
    with pytest.raises(ValueError, match="exactly one"):
        SliceSampler(num_slices=2, slice_len=3)
    with pytest.raises(ValueError, match="not both"):
        SliceSampler(slice_len=3, traj_key="a", end_key="b")


def test_slice_sampler_on_list_storage():
    rb = TensorDictReplayBuffer(
        storage=ListStorage(40),
        sampler=SliceSampler(slice_len=3, traj_key="traj"),
        batch_size=9,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(make_traj_data(2, 10, [4, 6]).reshape(-1))
    check_slices(rb.sample(), 3)


def test_max_value_writer_keeps_top_k():
    g = torch.Generator().manual_seed(0)
    k = 16
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(k), writer=TensorDictMaxValueWriter(rank_key=("next", "reward"))
    )
    everything = []
    for i in range(10):
        reward = torch.randn(7, 1, generator=g)
        uid = torch.arange(i * 7, i * 7 + 7)
        index = rb.extend(TensorDict({"uid": uid, "next": {"reward": reward}}, [7]))
        everything.append(reward.squeeze(1))
        assert index.shape == (7,)
        kept = index >= 0
        assert torch.equal(rb.storage.get(index[kept])["uid"], uid[kept])
    stored = sorted(rb.storage.get_leaf(("next", "reward")).squeeze(1).tolist())
    expected = sorted(torch.cat(everything).topk(k).values.tolist())
    assert stored == pytest.approx(expected)
    assert len(rb) == k


def test_max_value_writer_reduction_and_errors():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r", reduction="max")
    )
    rb.extend(TensorDict({"r": torch.tensor([[0.0, 5.0], [1.0, 1.0], [2.0, 2.0]])}, [3]))
    assert sorted(rb.storage.get_leaf("r").amax(1).tolist()) == [2.0, 5.0]
    fresh = TensorDictReplayBuffer(
        storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter(rank_key="r")
    )
    with pytest.raises(KeyError, match="no rank entry"):
        fresh.extend(TensorDict({"x": torch.zeros(1, 2)}, [1]))
    assert len(fresh) == 0
    with pytest.raises(ValueError, match="ndim=1"):
        TensorDictReplayBuffer(
            storage=LazyTensorStorage(4, ndim=2), writer=TensorDictMaxValueWriter(rank_key="r")
        )
    with pytest.raises(ValueError, match="reduction"):
        TensorDictMaxValueWriter(rank_key="r", reduction="prod")


def test_max_value_writer_with_prioritized_sampler():
    """Dropped elements are not given priorities; replaced slots get the max priority."""
    sampler = PrioritizedSampler(3, alpha=1.0, beta=1.0, eps=0.0)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(3), sampler=sampler, writer=TensorDictMaxValueWriter(rank_key="r")
    )
    rb.extend(TensorDict({"r": torch.tensor([1.0, 2.0, 3.0])}, [3]))
    rb.update_priority(torch.arange(3), torch.tensor([0.5, 0.5, 0.5]))
    index = rb.extend(TensorDict({"r": torch.tensor([0.0, 10.0])}, [2]))
    assert index.tolist() == [-1, 0]
    assert sampler.weights(torch.arange(3)).tolist() == [1.0, 0.5, 0.5]


def _episodes(key):
    """Four trajectories of 5 steps by id, two of 10 by done flag: the split tells which ruled."""
    n = 20
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[[9, 19]] = True
    td = TensorDict({"obs": torch.arange(n), "next": {"done": done}}, [n])
    if key is not None:
        td.set(key, torch.arange(n) // 5)
    return td


@pytest.mark.parametrize("key", [("collector", "traj_ids"), "episode", None])
def test_slice_sampler_without_keys_finds_the_trajectory_key_as_torchrl(tmp_path, key):
    """Expected slices are torchrl 0.14.1's for the same seeded code."""
    sampler = SliceSampler(slice_len=4)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(50),
        sampler=sampler,
        batch_size=8,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(_episodes(key))
    assert sampler.traj_key is None
    sample = rb.sample()["obs"].view(2, 4).tolist()
    assert sampler.traj_key == key and sampler.end_key == ("next", "done")
    expected = [[0, 1, 2, 3], [15, 16, 17, 18]] if key else [[0, 1, 2, 3], [10, 11, 12, 13]]
    assert sample == expected
    rb.dumps(tmp_path / "ckpt")  # the key found travels with the checkpoint
    fresh_sampler = SliceSampler(slice_len=4)
    fresh = TensorDictReplayBuffer(storage=LazyTensorStorage(50), sampler=fresh_sampler)
    fresh.loads(tmp_path / "ckpt")
    assert fresh_sampler.traj_key == key


def test_slice_sampler_draws_trajectories_uniformly_as_torchrl():
    """A trajectory is drawn uniformly, then a start inside it (TorchRL's rule): a 2-step-
    window trajectory is drawn as often as a 40-window one."""
    lengths = [5, 44]
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=4, traj_key="traj"),
        batch_size=4 * 2000,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(TensorDict({"traj": ids}, [len(ids)]))
    share = rb.sample()["traj"].view(-1, 4)[:, 0].float().mean().item()
    assert 0.45 < share < 0.55  # window-uniform drawing would give 41/43 = 0.95


def test_slice_sampler_keeps_torchrls_end_key_next_to_a_traj_key():
    assert SliceSampler(slice_len=2, traj_key="traj").end_key == ("next", "done")
    assert SliceSampler(slice_len=2, traj_key="traj").config()["end_key"] is None  # as dumped
