"""``split_trajectories``: re-lay a batch of adjacent trajectories as one row per trajectory."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

__all__ = ["split_trajectories"]


def split_trajectories(
    rollout_tensordict: TensorDictBase,
    *,
    prefix: NestedKey | None = None,
    trajectory_key: NestedKey | None = None,
    done_key: NestedKey | None = None,
    as_nested: bool | torch.layout = False,
) -> TensorDictBase:
    """Splits a batch whose trajectories lie along its last dim into one row per trajectory.

    The batch is flattened and cut wherever the trajectory id changes, so each trajectory must
    be contiguous in the flattened order (collector batches are: one row per env, time last).
    The rows keep that order (the trajectories of the first env row, then the next row's, ...)
    and are zero-padded to the longest one, with a boolean ``mask`` (true on real steps)
    written beside the ids. When every trajectory already fills a whole row the batch keeps
    its layout (a 1-D batch gets a leading dim of 1) and only the all-true mask is added.
    This is TorchRL's ``split_trajectories``.

    Args:
        rollout_tensordict: a batch ``[*B, T]`` (the input is not modified).
        prefix: where the ids and the mask live: ``(prefix, "traj_ids")`` and
            ``(prefix, "mask")``. Default: ``"collector"`` when the batch has a
            ``"collector"`` entry, else no prefix (``"traj_ids"``, ``"mask"``).
        trajectory_key: the key of the ids (the mask goes beside it); supersedes ``prefix``.
        done_key: without ids in the batch, they are counted from ``("next", done_key)``
            (default ``"done"``): a trajectory starts after each done step, the rows of a
            2-D batch get ids after the previous row's. The ids are written to the output.
        as_nested: ``True`` (or ``torch.strided``): return the trajectories as nested tensors
            of batch ``[num_trajs, -1]`` without padding and without mask.

    Returns:
        A new TensorDict of batch ``[num_trajs, max_len]`` (or ``[num_trajs, -1]`` nested).

    Raises:
        ValueError: ``as_nested=torch.jagged`` (a TensorDict cannot hold jagged tensors with a
            ragged batch dim).

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.arange(6.0).reshape(1, 6),
        ...                  "collector": {"traj_ids": torch.tensor([[0, 0, 1, 1, 1, 2]])}}, [1, 6])
        >>> out = split_trajectories(td)
        >>> out.batch_size, out["collector", "mask"].sum(-1).tolist()
        (torch.Size([3, 3]), [2, 3, 1])
        >>> split_trajectories(td, as_nested=True)["x"].unbind()[1].tolist()
        [2.0, 3.0, 4.0]
    """
    if as_nested is torch.jagged:
        raise ValueError(
            "split_trajectories: jagged nested tensors cannot be held by a TensorDict of batch "
            "[num_trajs, -1] (got as_nested=torch.jagged; expected True or torch.strided). Pass "
            "as_nested=True."
        )
    ids_key, mask_key = _keys(rollout_tensordict, prefix, trajectory_key)
    td = rollout_tensordict.copy()
    ids = td.get(ids_key, None)
    if ids is None:
        ids = _ids_from_done(td, done_key)
        td.set(ids_key, ids)
    flat_ids = ids.reshape(-1)
    _, counts = torch.unique_consecutive(flat_ids, return_counts=True)
    lengths = counts.tolist()
    if all(n == ids.shape[-1] for n in lengths):  # every trajectory is a whole row already
        td.set(mask_key, torch.ones(td.shape, dtype=torch.bool, device=td.device))
        return td.unsqueeze(0) if td.ndim == 1 else td
    flat = td.reshape(-1)
    if as_nested:
        return _nested(flat, lengths)
    return _padded(flat, lengths, mask_key)


def _keys(td: TensorDictBase, prefix: Any, trajectory_key: Any) -> tuple[NestedKey, NestedKey]:
    if trajectory_key is not None:
        path = (trajectory_key,) if isinstance(trajectory_key, str) else tuple(trajectory_key)
        mask = (*path[:-1], "mask")
        return trajectory_key, mask if len(mask) > 1 else "mask"
    if prefix is None and "collector" in td.keys():
        prefix = "collector"
    if prefix is None:
        return "traj_ids", "mask"
    return (prefix, "traj_ids"), (prefix, "mask")


def _ids_from_done(td: TensorDictBase, done_key: Any) -> torch.Tensor:
    """Trajectory ids counted from the done flags: +1 after each done step along time; each
    row of a 2-D batch continues after the largest id of the row before it."""
    key = ("next", *((done_key,) if isinstance(done_key, str) else (done_key or ("done",))))
    done = td.get(key)
    time = td.ndim - 1
    started = torch.zeros_like(done)
    started.narrow(time, 1, done.shape[time] - 1).copy_(done.narrow(time, 0, done.shape[time] - 1))
    ids = started.cumsum(time)
    if ids.ndim > td.ndim and ids.shape[-1] == 1:
        ids = ids.squeeze(-1)
    for row in range(1, ids.shape[0] if td.ndim > 1 else 0):
        ids[row] += ids[row - 1].max() + 1
    return ids


def _padded(flat: TensorDictBase, lengths: list[int], mask_key: NestedKey) -> TensorDictBase:
    n, longest = len(lengths), max(lengths)
    counts = torch.tensor(lengths)
    starts = torch.cumsum(counts, 0) - counts
    row = torch.repeat_interleave(torch.arange(n), counts)
    pos = torch.arange(flat.shape[0]) - torch.repeat_interleave(starts, counts)
    out = flat[:1].expand(n * longest).clone().zero_().reshape(n, longest)
    out[row, pos] = flat
    mask = torch.zeros(n, longest, dtype=torch.bool, device=flat.device)
    mask[row, pos] = True
    out.set(mask_key, mask)
    return out


def _nested(flat: TensorDictBase, lengths: list[int]) -> TensorDictBase:
    def nest(value: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():  # torch calls its strided layout a prototype
            warnings.simplefilter("ignore", UserWarning)
            return torch.nested.nested_tensor(list(value.split(lengths)), layout=torch.strided)

    return flat.apply(nest, batch_size=[len(lengths), -1])
