"""A tour of replay buffers, the way TorchRL's replay-buffer tutorial reads.

Plain ``ReplayBuffer`` over list, tensor and memory-mapped storages; ``add``/``extend``/``sample``,
indexing and ``len``; a ``TensorDictReplayBuffer`` that records sampled indices; sampling without
replacement; a prioritized buffer updated with ``update_tensordict_priority``; a batched
TensorDict added as one item; saving and loading with ``dumps``/``loads``.

Checked unchanged against torchrl 0.14.1 (only ``tdrl`` -> ``torchrl`` in the imports); the
reference install lacks TorchRL's C++ segment trees, so ``prioritized`` was checked there against
TorchRL's source and signatures (``PrioritizedSampler``, ``priority_key``, ``"priority_weight"``).
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from tensordict import TensorDict

from tdrl.data import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)


def prioritized(data: TensorDict) -> dict[str, Any]:
    """Prioritized sampling: TD errors written back make the large ones drawn more often."""
    n = data.shape[0]
    rb_prio = TensorDictReplayBuffer(
        storage=LazyTensorStorage(max_size=n),
        sampler=PrioritizedSampler(max_capacity=n, alpha=1.0, beta=1.0),
        priority_key="td_error",
        batch_size=n,
    )
    rb_prio.extend(data)
    everything = rb_prio[:]
    everything["td_error"] = torch.full((n,), 1e-3)
    everything["td_error"][0] = 1e3
    everything["index"] = torch.arange(n)
    rb_prio.update_tensordict_priority(everything)
    prio_sample = rb_prio.sample()
    return {"prio_index": prio_sample["index"], "prio_weight": prio_sample["priority_weight"]}


def main(budget: int = 100) -> dict[str, Any]:
    """Fill, sample, prioritise and save replay buffers.

    Args:
        budget: number of items written to each buffer.

    Returns:
        The samples, lengths and buffers a reader of the tutorial would look at.
    """
    torch.manual_seed(0)
    out: dict[str, Any] = {}

    # A list storage holds anything; add() stores one item, extend() several. With mixed
    # content, an identity collate_fn returns the sampled items as a list.
    rb_list = ReplayBuffer(storage=ListStorage(max_size=budget), collate_fn=lambda x: x)
    rb_list.add("a string")
    rb_list.extend([1, 2, 3])
    out["list_len"] = len(rb_list)
    out["list_first"] = rb_list[0]
    out["list_sample"] = rb_list.sample(batch_size=4)

    # A lazy tensor storage infers its layout from the first write.
    data = TensorDict(
        {
            "obs": torch.arange(budget * 3, dtype=torch.float32).view(budget, 3),
            "reward": torch.arange(budget, dtype=torch.float32).view(budget, 1),
        },
        batch_size=[budget],
    )
    rb_tensor = ReplayBuffer(storage=LazyTensorStorage(max_size=budget), batch_size=8)
    rb_tensor.extend(data)
    out["tensor_len"] = len(rb_tensor)
    out["tensor_sample"] = rb_tensor.sample()
    out["tensor_slice"] = rb_tensor[:3]

    # The memory-mapped storage writes to disk; the TensorDict buffer adds "index".
    with tempfile.TemporaryDirectory() as scratch:
        rb_memmap = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(max_size=budget, scratch_dir=scratch), batch_size=8
        )
        rb_memmap.extend(data)
        sample = rb_memmap.sample()
        out["memmap_sample"] = sample.clone()
        out["memmap_index"] = sample["index"].clone()
        del rb_memmap, sample

    # Without replacement: one epoch visits every item exactly once.
    rb_epoch = ReplayBuffer(
        storage=LazyTensorStorage(max_size=budget),
        sampler=SamplerWithoutReplacement(),
        batch_size=budget // 4,
    )
    rb_epoch.extend(data)
    out["epoch_rewards"] = torch.cat([rb_epoch.sample()["reward"] for _ in range(4)])

    out.update(prioritized(data))

    # A batched TensorDict added with add() is one item that keeps its batch dims.
    rb_add = ReplayBuffer(storage=LazyTensorStorage(max_size=budget))
    rb_add.add(TensorDict({"a": torch.zeros(10, 2)}, batch_size=[10]))
    rb_add.add(TensorDict({"a": torch.ones(10, 2)}, batch_size=[10]))
    out["add_len"] = len(rb_add)
    out["add_sample"] = rb_add.sample(1)

    # Save and restore: a fresh buffer loads the same content.
    with tempfile.TemporaryDirectory() as path:
        rb_tensor.dumps(path)
        restored = ReplayBuffer(storage=LazyTensorStorage(max_size=budget), batch_size=8)
        restored.loads(path)
        out["restored_len"] = len(restored)
        out["restored_all"] = restored[:]
    out["data"] = data
    return out


if __name__ == "__main__":
    main()
