"""RolloutBuffer: recording steps and flushing them at the end gives the data of per-step writes."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import RolloutBuffer


def _step(batch: tuple[int, ...], t: int, nested: bool) -> TensorDict:
    data = {
        "obs": torch.full((*batch, 3), float(t)),
        "done": torch.full((*batch, 1), t % 2 == 0),
        "next": {"obs": torch.full((*batch, 3), t + 1.0), "reward": torch.rand(*batch, 1)},
    }
    if nested:
        data["agents"] = {"action": torch.randint(0, 5, (*batch, 2, 1))}
    return TensorDict(data, batch_size=batch)


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_record_and_flush_equal_per_step_writes(batch, nested):
    steps = [_step(batch, t, nested) for t in range(5)]
    ids = [torch.full(batch, t, dtype=torch.long) for t in range(5)]
    example = steps[0].clone().set("traj_ids", ids[0])
    written = RolloutBuffer(example, 5, external=["traj_ids"])
    recorded = RolloutBuffer(example, 5, external=["traj_ids"])
    for t, (step, i) in enumerate(zip(steps, ids)):
        written.write(step, t, [i])
        recorded.record(step, t, [i])
    recorded.flush()
    for key in written.data.keys(True, True):
        torch.testing.assert_close(recorded.data.get(key), written.data.get(key), msg=str(key))
    memory = recorded.data.get("obs").data_ptr()
    for t, step in enumerate(steps):  # a second batch: written into the same memory
        recorded.record(step.apply(lambda x: x + 1 if x.dtype != torch.bool else x), t, [ids[t]])
    recorded.flush()
    assert recorded.data.get("obs").data_ptr() == memory
    torch.testing.assert_close(recorded.data.get("obs"), written.data.get("obs") + 1)


def test_flush_casts_and_broadcasts_like_write():
    example = TensorDict({"x": torch.zeros(2, 3), "flag": torch.zeros(2, 1)}, [2])
    written, recorded = RolloutBuffer(example, 2), RolloutBuffer(example, 2)
    for t in range(2):
        # float64 values and a [2, 1] value for a [2, 3] entry: cast and broadcast on copy
        step = TensorDict(
            {"x": torch.full((2, 1), t + 0.5, dtype=torch.float64), "flag": torch.ones(2, 1)}, [2]
        )
        written.write(step, t)
        recorded.record(step, t)
    recorded.flush()
    torch.testing.assert_close(recorded.data["x"], written.data["x"])
    assert recorded.data["x"].dtype == torch.float32


def test_record_needs_the_steps_in_order_and_step_0_starts_over():
    example = TensorDict({"x": torch.zeros(2)}, [2])
    buf = RolloutBuffer(example, 3)
    buf.record(TensorDict({"x": torch.ones(2)}, [2]), 0)
    with pytest.raises(RuntimeError, match="in order"):
        buf.record(TensorDict({"x": torch.ones(2)}, [2]), 2)
    for t in range(3):  # an interrupted batch is dropped when step 0 comes again
        buf.record(TensorDict({"x": torch.full((2,), float(t))}, [2]), t)
    buf.flush()
    assert buf.data["x"].tolist() == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
    with pytest.raises(KeyError, match="'x' is missing at step 0"):
        buf.record(TensorDict({"y": torch.ones(2)}, [2]), 0)
