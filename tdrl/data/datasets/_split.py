"""Re-lays a flat dataset ``[N]`` as one zero-padded row per trajectory ``[num_traj, max_len]``.

This is what TorchRL's datasets do with ``split_trajs=True`` (through its collectors'
``split_trajectories``, which tdrl keeps in :mod:`tdrl.collectors`, a layer above the data
package): trajectories are cut after every ``("next", "done")`` step, ``"traj_ids"`` holds each
step's trajectory and ``"mask"`` is true on real (not padding) steps.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["split_by_done"]


def split_by_done(data: TensorDictBase) -> TensorDictBase:
    """Pads the trajectories of ``data`` (a ``[N]`` batch) into ``[num_traj, max_len]`` rows.

    Examples:
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([[False], [True], [False], [False], [True]])
        >>> td = TensorDict({"x": torch.arange(5), "next": {"done": done}}, [5])
        >>> out = split_by_done(td)
        >>> out["x"].tolist(), out["mask"].tolist()
        ([[0, 1, 0], [2, 3, 4]], [[True, True, False], [True, True, True]])
    """
    done = data.get(("next", "done")).reshape(data.shape[0], -1).any(-1)
    started = torch.zeros_like(done)
    started[1:] = done[:-1]
    ids = started.long().cumsum(0)
    data = data.copy()
    data.set("traj_ids", ids)
    lengths = torch.bincount(ids)
    n, longest = lengths.numel(), int(lengths.max())
    starts = torch.cumsum(lengths, 0) - lengths
    pos = torch.arange(data.shape[0]) - starts[ids]
    flat = ids * longest + pos
    out = data[:1].expand(n * longest).clone().zero_()
    out[flat] = data
    mask = torch.zeros(n * longest, dtype=torch.bool)
    mask[flat] = True
    out.set("mask", mask)
    return out.reshape(n, longest)
