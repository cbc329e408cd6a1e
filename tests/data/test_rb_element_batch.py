"""Elements with batch dims (TorchRL semantics): ``add`` of a batched TensorDict stores one element.

TorchRL: after ``rb.add(td)`` with ``td.batch_size == (10,)``, ``len(rb) == 1`` and
``rb.sample(1).batch_size == (1, 10)``; ``extend`` of ``[N, 10]`` stores ``N`` elements of batch
``[10]``; a TensorDict sample's ``"index"`` (and ``"priority_weight"``) are repeated over the
element dims; nested TensorDicts keep their own batch sizes.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

STORAGES = {
    "list": lambda n: ListStorage(n),
    "tensor": lambda n: LazyTensorStorage(n),
    "memmap": lambda n: LazyMemmapStorage(n),
}
BUFFERS = {
    "plain": lambda s: ReplayBuffer(storage=s),
    "td": lambda s: TensorDictReplayBuffer(storage=s),
    "prioritized": lambda s: PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=s),
    "td_prioritized": lambda s: TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=s),
}


def element(value: float, n: int = 10) -> TensorDict:
    """One element of batch [n] (with a nested entry and a per-entry feature dim)."""
    obs = torch.full((n, 2), value)
    return TensorDict({"obs": obs, "next": {"obs": obs + 1}}, [n])


def _sample(rb, batch_size: int):
    out = rb.sample(batch_size)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("buffer", BUFFERS)
def test_add_of_batched_tensordict_stores_one_element(buffer, storage):
    rb = BUFFERS[buffer](STORAGES[storage](100))
    assert int(rb.add(element(0.0))) == 0
    assert int(rb.add(element(1.0))) == 1
    assert len(rb) == 2
    sample = _sample(rb, 1)
    assert sample.batch_size == (1, 10)
    assert sample["next"].batch_size == (1, 10)
    assert sample["obs"].shape == (1, 10, 2)
    many = _sample(rb, 5)
    assert many.batch_size == (5, 10)
    # Every sampled row is one whole stored element (all 10 entries from the same add()).
    values = many["obs"][..., 0]
    assert torch.equal(values, values[:, :1].expand(5, 10))
    assert set(values[:, 0].tolist()) <= {0.0, 1.0}
    assert torch.equal(many["next", "obs"], many["obs"] + 1)


@pytest.mark.parametrize("storage", STORAGES)
def test_extend_keeps_element_batch_and_index_is_repeated(storage):
    rb = TensorDictReplayBuffer(storage=STORAGES[storage](100))
    data = torch.stack([element(float(i), n=3) for i in range(4)])  # 4 elements of batch [3]
    assert rb.extend(data).tolist() == [0, 1, 2, 3]
    rb.add(element(4.0, n=3))
    assert len(rb) == 5
    sample = rb.sample(6)
    assert sample.batch_size == (6, 3)
    index = sample["index"]
    assert index.shape == (6, 3)
    assert torch.equal(index, index[:, :1].expand(6, 3))
    assert torch.equal(sample["obs"][:, 0, 0], index[:, 0].float())  # element i holds value i


def test_add_then_extend_with_other_element_batch_is_refused():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.add(element(0.0, n=10))
    with pytest.raises(ValueError, match="element batch size"):
        rb.extend(element(1.0, n=10))  # 10 elements of batch () and obs [2]: not [10]-batched


def test_nested_tensordict_keeps_its_own_batch_size():
    agents = TensorDict({"r": torch.arange(12.0).view(4, 3)}, [4, 3])
    data = TensorDict({"obs": torch.arange(4.0).unsqueeze(-1), "agents": agents}, [4])
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(data)
    sample = rb.sample(5)
    assert sample.batch_size == (5,)
    assert sample["agents"].batch_size == (5, 3)
    rows = sample["index"]
    assert torch.equal(sample["agents", "r"], data["agents", "r"][rows])


def test_prioritized_update_with_element_batch_reduces_to_one_priority_per_element():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, eps=0.0, reduction="max", storage=LazyTensorStorage(10)
    )
    rb.add(element(0.0, n=4))
    rb.add(element(1.0, n=4))
    sample = TensorDict({"index": torch.tensor([[0] * 4, [1] * 4])}, [2, 4])
    sample["td_error"] = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, 0.5, 1.0, 0.0]])
    rb.update_tensordict_priority(sample)
    # max over each element's entries: 3 and 1; with alpha=1 sampling weights are 3:1.
    probs = rb.sampler.weights(torch.arange(2))
    assert probs.tolist() == pytest.approx([3.0, 1.0])
    drawn = rb.sample(8)
    assert drawn["priority_weight"].shape == (8, 4)


def test_element_batch_survives_a_checkpoint(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.add(element(2.0, n=3))
    rb.dumps(tmp_path / "rb")
    restored = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    restored.loads(tmp_path / "rb")
    sample = restored.sample(2)
    assert sample.batch_size == (2, 3)
    assert torch.equal(sample["obs"], torch.full((2, 3, 2), 2.0))
