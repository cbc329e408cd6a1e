"""``split_trajectories``: re-lay a ``[*B, T]`` batch as ``[num_trajs, max_len]`` with a mask."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["split_trajectories"]


def split_trajectories(
    batch: TensorDictBase, traj_key: tuple[str, str] = ("collector", "traj_ids")
) -> TensorDictBase:
    """Pads every trajectory of a collected batch to the longest one.

    Args:
        batch: a TensorDict of batch ``[*B, T]`` holding trajectory ids at ``traj_key``.
        traj_key: where the ids are.

    Returns:
        A TensorDict of batch ``[num_trajs, max_len]`` ordered by trajectory id, with a boolean
        ``("collector", "mask")`` that is true on real steps (padding is zeros).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.arange(6.0).reshape(1, 6),
        ...                  "collector": {"traj_ids": torch.tensor([[0, 0, 1, 1, 1, 2]])}}, [1, 6])
        >>> out = split_trajectories(td)
        >>> out.batch_size, out["collector", "mask"].sum(-1).tolist()
        (torch.Size([3, 3]), [2, 3, 1])
    """
    flat = batch.reshape(-1)
    ids = flat.get(traj_key)
    # keep time order inside each trajectory: sort by id, stable across the flattened [B*T] order
    order = torch.sort(ids, stable=True).indices
    flat = flat[order]
    ids = ids[order]
    uniq, counts = torch.unique_consecutive(ids, return_counts=True)
    n, max_len = uniq.numel(), int(counts.max())
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(ids.numel()) - torch.repeat_interleave(starts, counts)
    row = torch.repeat_interleave(torch.arange(n), counts)
    out = flat[:1].expand(n * max_len).clone().zero_()
    out = out.reshape(n, max_len)
    out[row, pos] = flat
    mask = torch.zeros(n, max_len, dtype=torch.bool)
    mask[row, pos] = True
    out.set(("collector", "mask"), mask)
    return out
