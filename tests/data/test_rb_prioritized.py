"""Sum/min trees against naive references; prioritized sampling, weights and priority updates."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tdrl.data.replay._prioritized import SegmentTree
from tdrl.errors import CheckpointError

# (capacity, fanout, top_size): a flat top level, two and four levels, odd sizes.
TREES = [(50, 128, 16384), (1000, 8, 16), (777, 4, 4), (5000, 16, 64)]


@pytest.mark.parametrize(("capacity", "fanout", "top"), TREES)
def test_sum_tree_matches_cumsum(capacity, fanout, top):
    g = torch.Generator().manual_seed(capacity)
    tree = SegmentTree(capacity, "sum", fanout, top)
    mint = SegmentTree(capacity, "min", fanout, top)
    leaves = torch.zeros(capacity, dtype=torch.float64)
    for _ in range(20):
        index = torch.randperm(capacity, generator=g)[: capacity // 7 + 1]
        values = torch.rand(index.numel(), generator=g, dtype=torch.float64)
        values[values < 0.2] = 0.0  # zero-weight leaves are never found
        leaves[index] = values
        tree.update(index, values)
        mint.update(index, torch.where(values > 0, values, math.inf))
        assert tree.total() == pytest.approx(float(leaves.sum()), rel=1e-12)
        positive = leaves[leaves > 0]
        assert mint.total() == (float(positive.min()) if positive.numel() else math.inf)
        fraction = torch.rand(500, generator=g, dtype=torch.float64)
        expected = torch.searchsorted(leaves.cumsum(0), fraction * leaves.sum(), right=True)
        got, weight = tree.find(fraction)
        assert torch.equal(weight, leaves[got])
        # Identical up to float rounding at segment boundaries (probability ~1e-13 here).
        assert (got == expected).float().mean() == 1.0
        assert bool((leaves[got] > 0).all())
    # Every inner node is the reduction of its children.
    rebuilt = SegmentTree(capacity, "sum", fanout, top)
    rebuilt.data.copy_(tree.data)
    rebuilt.rebuild()
    torch.testing.assert_close(rebuilt.data, tree.data, rtol=1e-12, atol=0.0)


def test_tree_check_rejects_inconsistent_data():
    tree = SegmentTree(100, "sum", 4, 4)
    tree.update(torch.arange(100), torch.rand(100, dtype=torch.float64))
    tree.check(tree.data.clone(), "here")
    bad = tree.data.clone()
    bad[-1] += 1.0  # the top level no longer sums its children
    with pytest.raises(CheckpointError, match="inconsistent"):
        tree.check(bad, "here")
    bad = tree.data.clone()
    bad[3] = -1.0
    with pytest.raises(CheckpointError, match="invalid leaves"):
        tree.check(bad, "here")
    with pytest.raises(CheckpointError, match="wrong layout"):
        tree.check(tree.data[:-1], "here")


def test_tree_levels_shrink():
    assert SegmentTree(10_000, "sum").sizes == [10_000]
    assert SegmentTree(1_000_000, "sum").sizes == [1_000_064, 7813]
    assert len(SegmentTree(1000, "sum", 2, 2).sizes) == 10


def test_find_never_returns_zero_weights():
    tree = SegmentTree(300, "sum", 4, 4)  # five levels
    tree.update(torch.tensor([2, 6]), torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert tree._nearest_positive(torch.tensor([0, 2, 5, 9])).tolist() == [2, 2, 2, 6]
    edge = torch.tensor([0.0, 0.5 - 2**-53, 0.5 + 2**-40, 1.0 - 2**-53], dtype=torch.float64)
    index, weight = tree.find(edge)
    assert index.tolist() == [2, 2, 6, 6] and bool((weight > 0).all())
    with pytest.raises(ValueError, match="nothing to sample"):
        SegmentTree(10, "sum").find(edge)


def make_buffer(priorities, alpha=0.8, beta=0.6, seed=0):
    n = len(priorities)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(n),
        sampler=PrioritizedSampler(n, alpha=alpha, beta=beta),
        generator=torch.Generator().manual_seed(seed),
    )
    index = rb.extend(torch.arange(n))
    rb.update_priority(index, torch.tensor(priorities, dtype=torch.float64))
    return rb


def test_sampling_frequencies_follow_priorities():
    priorities = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]
    alpha, eps = 0.8, 1e-8
    rb = make_buffer(priorities, alpha=alpha)
    n = 60_000
    _, info = rb.sample(n, return_info=True)
    counts = torch.bincount(info["index"], minlength=len(priorities)).double()
    weights = (torch.tensor(priorities, dtype=torch.float64) + eps) ** alpha
    expected = weights / weights.sum() * n
    # Pearson chi-square with 5 degrees of freedom: 30 is far in the tail (p < 1e-5).
    nonzero = expected > 1
    chi2 = ((counts[nonzero] - expected[nonzero]) ** 2 / expected[nonzero]).sum()
    assert chi2 < 30, (counts, expected)
    assert counts[0] == 0  # weight eps**alpha ~ 4e-7


def test_importance_weights_by_hand():
    priorities = [0.5, 1.0, 3.0]
    alpha, beta, eps = 0.7, 0.4, 1e-8
    rb = make_buffer(priorities, alpha=alpha, beta=beta)
    _, info = rb.sample(64, return_info=True)
    w = [(p + eps) ** alpha for p in priorities]
    expected = torch.tensor([(w[i] / min(w)) ** (-beta) for i in info["index"].tolist()])
    torch.testing.assert_close(info["priority_weight"], expected.float())
    assert info["priority_weight"].dtype == torch.float32


def test_new_elements_get_the_max_priority():
    sampler = PrioritizedSampler(10, alpha=1.0, beta=1.0, eps=0.0)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler)
    first = rb.extend(torch.arange(3))
    assert sampler.weights(first).tolist() == [1.0, 1.0, 1.0]  # the initial max priority is 1
    rb.update_priority(first, torch.tensor([0.5, 7.0, 2.0]))
    assert sampler.max_priority == 7.0
    second = rb.extend(torch.arange(2))
    assert sampler.weights(second).tolist() == [7.0, 7.0]
    rb.update_priority(first, torch.tensor([0.1, 0.1, 0.1]))  # the max is the max *seen*
    assert sampler.weights(rb.extend(torch.arange(1))).tolist() == [7.0]


def test_duplicate_indices_last_wins():
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0)
    rb = ReplayBuffer(storage=LazyTensorStorage(4), sampler=sampler)
    rb.extend(torch.arange(4))
    rb.update_priority(torch.tensor([1, 2, 1, 1]), torch.tensor([5.0, 3.0, 9.0, 2.0]))
    assert sampler.weights(torch.arange(4)).tolist() == [1.0, 2.0, 3.0, 1.0]


@pytest.mark.parametrize(
    ("index", "priority", "error", "match"),
    [
        ([0, 1], [float("nan"), 1.0], ValueError, "invalid priorities"),
        ([0, 1], [1.0, -2.0], ValueError, "invalid priorities"),
        ([0, 1], [float("inf"), 1.0], ValueError, "invalid priorities"),
        ([0, 1], [1.0, 2.0, 3.0], ValueError, "shapes differ"),
        ([[0, 1]], [1.0, 2.0], ValueError, "shapes differ"),
        ([0, 7], [1.0, 2.0], IndexError, "out of range"),
    ],
    ids=["nan", "negative", "inf", "length", "shape", "range"],
)
def test_bad_priority_updates(index, priority, error, match):
    rb = make_buffer([1.0, 1.0, 1.0, 1.0])
    before = rb.sampler.weights(torch.arange(4)).clone()
    with pytest.raises(error, match=match):
        rb.update_priority(torch.tensor(index), torch.tensor(priority))
    assert torch.equal(rb.sampler.weights(torch.arange(4)), before)


def test_scalar_priority_broadcasts():
    rb = make_buffer([1.0, 1.0, 1.0], alpha=1.0)
    rb.update_priority(torch.tensor([0, 2]), 4.0)
    assert rb.sampler.weights(torch.arange(3)).tolist() == pytest.approx([4.0, 1.0, 4.0])


def test_update_priority_needs_a_prioritized_sampler():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(torch.arange(2))
    with pytest.raises(TypeError, match="no priorities"):
        rb.update_priority(torch.tensor([0]), torch.tensor([1.0]))


def test_sampler_arguments():
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedSampler(10, alpha=-1.0, beta=0.5)
    with pytest.raises(ValueError, match="max_capacity"):
        PrioritizedSampler(0, alpha=1.0, beta=0.5)
    with pytest.raises(ValueError, match="reduction"):
        PrioritizedSampler(10, alpha=1.0, beta=0.5, reduction="prod")
    with pytest.raises(ValueError, match="smaller than the storage"):
        ReplayBuffer(storage=LazyTensorStorage(20), sampler=PrioritizedSampler(10, 1.0, 1.0))


def test_prioritized_replay_buffer_returns_info():
    rb = PrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(16), batch_size=4)
    rb.extend({"obs": torch.randn(8, 2)})
    data, info = rb.sample(return_info=True)
    assert data["obs"].shape == (4, 2) and sorted(info) == ["index", "priority_weight"]
    rb.update_priority(info["index"], torch.rand(4))
    # As TorchRL (return_info defaults to False): sample() alone is the batch, not a tuple.
    assert isinstance(rb.sample(), dict) and rb.sample(4, True)[1]["index"].shape == (4,)


@pytest.mark.parametrize(
    ("shape", "reduction", "expected"),
    [
        ((4,), "max", [1.0, 2.0]),
        ((4, 1), "max", [1.0, 2.0]),
        ((4, 3), "max", [3.0, 4.0]),
        ((4, 3), "mean", [2.0, 3.0]),
        ((4, 3), "min", [1.0, 2.0]),
        ((4, 3), "sum", [6.0, 9.0]),
        ((4, 3), "median", [2.0, 3.0]),
    ],
)
def test_update_tensordict_priority_reduces_extra_dims(shape, reduction, expected):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, eps=0.0, reduction=reduction, storage=LazyTensorStorage(8)
    )
    rb.extend(TensorDict({"obs": torch.zeros(4, 2)}, [4]))
    base = torch.tensor([1.0, 2.0, 1.0, 2.0]).view(4, *([1] * (len(shape) - 1)))
    offsets = torch.arange(shape[-1] if len(shape) > 1 else 1, dtype=torch.float32)
    priority = (base + offsets).reshape(shape)
    td = TensorDict({"index": torch.arange(4), "td_error": priority}, [4])
    rb.update_tensordict_priority(td)
    assert rb.sampler.weights(torch.arange(2)).tolist() == pytest.approx(expected)


def test_update_tensordict_priority_errors():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(8))
    rb.extend(TensorDict({"obs": torch.zeros(4, 2)}, [4]))
    with pytest.raises(KeyError, match="td_error"):
        rb.update_tensordict_priority(TensorDict({"index": torch.arange(4)}, [4]))
    with pytest.raises(ValueError, match="does not match the index"):
        bad = TensorDict({"index": torch.arange(4), "td_error": torch.ones(2, 3)}, [])
        rb.update_tensordict_priority(bad)
    plain = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
    plain.extend(TensorDict({"obs": torch.zeros(4, 2)}, [4]))
    with pytest.raises(TypeError, match="no priorities"):
        plain.update_tensordict_priority(
            TensorDict({"index": torch.arange(4), "td_error": torch.ones(4)}, [4])
        )


@pytest.mark.parametrize("reduction", ["max", "min", "sum", "mean", "median"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_a_trailing_priority_dim_of_one_gives_the_bits_of_the_reduction(reduction, dtype):
    """A [B, 1] TD error (what DQN, DDPG and TD3 write) sets exactly the weights the reduction
    over its last dim gives; the reduced tensor handed on is not the caller's memory."""
    g = torch.Generator().manual_seed(0)
    priority = (torch.rand(16, 1, generator=g, dtype=torch.float64) * 7).to(dtype)
    rbs = [
        TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, reduction=reduction, storage=LazyTensorStorage(32)
        )
        for _ in range(2)
    ]
    flat = priority if priority.is_floating_point() else priority.double()
    expected = {
        "max": lambda: flat.amax(-1),
        "min": lambda: flat.amin(-1),
        "sum": lambda: flat.sum(-1),
        "mean": lambda: flat.mean(-1),
        "median": lambda: flat.median(-1).values,
    }[reduction]()
    given = priority.clone()
    for rb in rbs:
        rb.extend(TensorDict({"obs": torch.zeros(32, 2)}, [32]))
    index = torch.arange(3, 19)
    rbs[0].update_tensordict_priority(TensorDict({"index": index, "td_error": priority}, [16]))
    rbs[1].update_priority(index, expected)
    everything = torch.arange(32)
    assert torch.equal(rbs[0].sampler.weights(everything), rbs[1].sampler.weights(everything))
    assert rbs[0].sampler.max_priority == rbs[1].sampler.max_priority
    assert torch.equal(priority, given)


def test_update_tensordict_priority_names_a_missing_nested_entry():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, priority_key=("agents", "td_error"), storage=LazyTensorStorage(8)
    )
    rb.extend(TensorDict({"obs": torch.zeros(4, 2)}, [4]))
    node = TensorDict({"index": torch.arange(4), "agents": {"td_error": {"x": torch.ones(4)}}}, [4])
    with pytest.raises(KeyError, match=r"no \('agents', 'td_error'\) entry"):
        rb.update_tensordict_priority(node)  # a node, not a leaf
    with pytest.raises(KeyError, match=r"no \('agents', 'td_error'\) entry .*'index'"):
        rb.update_tensordict_priority(TensorDict({"index": torch.arange(4)}, [4]))


def test_extend_with_priority_key_sets_priorities():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, eps=0.0, storage=LazyTensorStorage(8)
    )
    index = rb.extend(
        TensorDict({"obs": torch.zeros(3, 2), "td_error": torch.tensor([[0.5], [2.0], [1.5]])}, [3])
    )
    assert rb.sampler.weights(index).tolist() == [0.5, 2.0, 1.5]
    assert rb.sampler.max_priority == 2.0


def test_training_loop_round():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.6,
        beta=0.4,
        storage=LazyTensorStorage(100),
        batch_size=16,
        generator=torch.Generator().manual_seed(1),
    )
    for i in range(12):
        rb.extend(
            TensorDict({"obs": torch.randn(10, 3), "next": {"obs": torch.randn(10, 3)}}, [10])
        )
        sample = rb.sample()
        assert sample["priority_weight"].max() <= 1.0 + 1e-6
        sample["td_error"] = sample["obs"].norm(dim=-1)
        rb.update_tensordict_priority(sample)
        # Extending a sample back drops the sample-only entries.
        if i == 0:
            rb.extend(sample.exclude("td_error"))
    assert len(rb) == 100


def test_default_priority_is_torchrls_raw_max_priority():
    sampler = PrioritizedSampler(8, alpha=0.7, beta=0.5)
    assert sampler.default_priority == 1.0
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([4.0, 2.0]))
    assert sampler.default_priority == 4.0  # as TorchRL: the raw value, before (p + eps) ** alpha
