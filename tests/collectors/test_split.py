"""split_trajectories: TorchRL's layout (flattened order, whole-row shortcut, ids counted from
done, key options) and ``as_nested``. Expected values come from TorchRL 0.14.1."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.collectors import split_trajectories


def _batch() -> TensorDict:
    ids = torch.tensor([[0, 0, 2, 2, 2, 4], [1, 1, 1, 3, 3, 3]])
    return TensorDict(
        {"x": torch.arange(12).reshape(2, 6), "collector": {"traj_ids": ids}}, batch_size=[2, 6]
    )


def test_rows_follow_the_flattened_order_not_the_ids():
    batch = _batch()
    out = split_trajectories(batch)
    assert out.batch_size == (5, 3)
    # env 0's trajectories (ids 0, 2, 4), then env 1's (1, 3): TorchRL does not sort by id
    assert out["collector", "traj_ids"].tolist() == [
        [0, 0, 0],
        [2, 2, 2],
        [4, 0, 0],
        [1, 1, 1],
        [3, 3, 3],
    ]
    assert out["x"].tolist() == [[0, 1, 0], [2, 3, 4], [5, 0, 0], [6, 7, 8], [9, 10, 11]]
    assert out["collector", "mask"].sum(-1).tolist() == [2, 3, 1, 3, 3]
    assert "mask" not in batch["collector"].keys()  # the input is left alone


def test_whole_rows_keep_their_layout_and_a_1d_batch_gets_a_leading_dim():
    ids = torch.tensor([[5, 5, 5], [1, 1, 1]])
    batch = TensorDict({"x": torch.arange(6).reshape(2, 3), "collector": {"traj_ids": ids}}, [2, 3])
    out = split_trajectories(batch)
    assert out.batch_size == (2, 3)
    assert torch.equal(out["x"], batch["x"])  # not re-ordered by id
    assert out["collector", "mask"].all()
    flat = TensorDict({"x": torch.arange(3), "collector": {"traj_ids": torch.zeros(3)}}, [3])
    assert split_trajectories(flat).batch_size == (1, 3)


def test_ids_are_counted_from_done_without_a_collector_entry():
    done = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.bool).unsqueeze(-1)
    batch = TensorDict({"x": torch.arange(8).reshape(2, 4), ("next", "done"): done}, [2, 4])
    out = split_trajectories(batch)
    assert out["traj_ids"].tolist() == [[0, 0, 0, 0], [1, 1, 0, 0], [2, 2, 2, 2]]
    assert out["mask"].sum(-1).tolist() == [2, 2, 4]
    assert out["x"].tolist() == [[0, 1, 0, 0], [2, 3, 0, 0], [4, 5, 6, 7]]
    custom = batch.rename_key_(("next", "done"), ("next", "end"))
    assert split_trajectories(custom, done_key="end")["traj_ids"].shape == (3, 4)


def test_trajectory_key_and_prefix_place_the_ids_and_the_mask():
    ids = torch.tensor([0, 0, 1])
    batch = TensorDict({"x": torch.arange(3), "meta": {"tid": ids}}, [3])
    out = split_trajectories(batch, trajectory_key=("meta", "tid"))
    assert out["meta", "mask"].tolist() == [[True, True], [True, False]]
    batch = TensorDict({"x": torch.arange(3), "p": {"traj_ids": ids}}, [3])
    assert split_trajectories(batch, prefix="p")["p", "mask"].shape == (2, 2)


@pytest.mark.parametrize("as_nested", [True, torch.strided])
def test_as_nested_gives_one_unpadded_nested_row_per_trajectory(as_nested):
    out = split_trajectories(_batch(), as_nested=as_nested)
    assert out.batch_size == (5, -1)
    assert out["x"].is_nested and out["x"].layout == torch.strided
    assert [t.tolist() for t in out["x"].unbind()] == [
        [0, 1],
        [2, 3, 4],
        [5],
        [6, 7, 8],
        [9, 10, 11],
    ]
    assert "mask" not in out["collector"].keys()  # TorchRL adds no mask to nested rows


def test_as_nested_jagged_is_refused():
    with pytest.raises(ValueError, match=r"as_nested=torch\.jagged"):
        split_trajectories(_batch(), as_nested=torch.jagged)
