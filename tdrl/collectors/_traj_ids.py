"""Trajectory ids: one per env member (and per member of each nested done group)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.envs import EnvBase
from tdrl.envs.core._fast import lookup, truthy
from tdrl.envs.core._keys import as_key, key_tuple

__all__ = [
    "TRAJ_KEY",
    "WORKER_KEY",
    "TrajIds",
    "is_traj_ids_key",
    "trajectory_ids",
]

TRAJ_KEY = ("collector", "traj_ids")
WORKER_KEY = ("collector", "worker_id")


def is_traj_ids_key(key: Any) -> bool:
    """Whether ``key`` ends with ``("collector", "traj_ids")`` (the ids of any done group)."""
    return (tuple(key[-2:]) if isinstance(key, tuple) else (key,)) == TRAJ_KEY


class TrajIds:
    """The trajectory ids of one done group: one per group member, renewed after each done.

    ``done_key`` is read under ``"next"``; trailing dims of the done leaf beyond ``shape`` are
    reduced with ``any`` (an env member is done when its first group is).
    """

    __slots__ = ("done_key", "done_path", "ids", "key", "next_id", "shape")

    def __init__(self, key: Any, done_key: Any, shape: torch.Size) -> None:
        self.key = as_key(key)
        self.done_path = ("next", *key_tuple(done_key))
        self.done_key = as_key(self.done_path)
        self.shape = shape
        self.next_id = 0
        self.ids = torch.zeros(shape, dtype=torch.long)

    def start(self) -> None:
        n = self.shape.numel()
        self.ids = torch.arange(self.next_id, self.next_id + n).reshape(self.shape)
        self.next_id += n

    def restart(self, mask: torch.Tensor) -> None:
        """Gives fresh ids to the members of the envs where ``mask`` (env batch shape) is true."""
        m = mask.reshape(*mask.shape, *([1] * (len(self.shape) - mask.ndim))).expand(self.shape)
        n = int(m.sum())
        self.ids = self.ids.masked_scatter(m, torch.arange(self.next_id, self.next_id + n))
        self.next_id += n

    def renew(self, td: TensorDictBase) -> torch.Tensor | None:
        """Gives fresh ids where the group is done; returns the done flags (None if none)."""
        done = lookup(td, self.done_path)
        if done is None:
            done = td.get(self.done_key)  # raises the KeyError naming the key
        if not truthy(done):
            return None
        done = done.reshape(*self.shape, -1).any(-1)
        n = int(done.sum())
        fresh = torch.arange(self.next_id, self.next_id + n)
        self.ids = self.ids.masked_scatter(done, fresh)
        self.next_id += n
        return done


def trajectory_ids(env: EnvBase) -> list[TrajIds]:
    """Ids per env member (from the first done group) at ``("collector", "traj_ids")``, then
    per member of every nested done group at ``(*prefix, "collector", "traj_ids")``."""
    groups = env.done_groups
    out = [TrajIds(("collector", "traj_ids"), groups[0].done, env.batch_size)]
    spec = env.full_done_spec
    for g in groups:
        if not g.prefix:
            continue
        shape = spec[g.done].shape
        shape = shape[:-1] if shape[-1:] == (1,) else shape
        out.append(TrajIds((*g.prefix, "collector", "traj_ids"), g.done, shape))
    return out
