"""Collector: runs a policy in an env and yields preallocated ``[*env.batch_size, T]`` batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.collectors._buffer import RolloutBuffer
from tdrl.collectors._split import split_trajectories
from tdrl.collectors._weight_sync import as_weights, policy_weights
from tdrl.envs import EnvBase
from tdrl.envs.batched._shared import _lookup
from tdrl.envs.core._keys import as_key, key_tuple
from tdrl.modules._exploration_type import ExplorationType, set_exploration_type

__all__ = ["Collector"]

Policy = Callable[[TensorDictBase], TensorDictBase]


_C = TypeVar("_C", bound="ClosingContext")


class ClosingContext:
    """``with`` blocks and garbage collection call ``shutdown`` (the collectors' base)."""

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass


class Collector(ClosingContext):
    """Collects batches of transitions from one (possibly batched) env with a policy.

    Iterating yields TensorDicts of batch ``[*env.batch_size, T]`` with
    ``T = frames_per_batch / env.batch_size.numel()`` (time last), each step holding the root
    entries the policy saw and wrote and ``"next"``, plus trajectory ids at
    ``("collector", "traj_ids")`` that stay unique across batches and envs. The batch memory is
    allocated once (from a dry run of the env and the policy) and written in place; iterating
    yields a copy of it that the caller owns (``list(collector)`` keeps every batch, and keys
    written into a batch never reach the next one). With ``return_same_td=True`` the iterator
    yields the collector's own memory instead (the same TensorDict every time, overwritten by
    the next batch), which spares one copy per batch. :meth:`rollout` always returns that
    memory.

    Args:
        create_env_fn: an env, or a callable returning one.
        policy: a TensorDict-to-TensorDict callable writing the actions; random actions from the
            action spec (masks honoured) when None.
        frames_per_batch: frames per yielded batch (a multiple of the env batch numel).
        total_frames: stop after this many frames (-1: never stop).
        max_frames_per_traj: truncate (``truncated`` and ``done`` set) and reset trajectories
            longer than this.
        init_random_frames: use random actions for the first frames.
        reset_at_each_iter: reset every env at the start of each batch.
        split_trajs: yield ``[num_trajs, max_len]`` padded trajectories with a
            ``("collector", "mask")``.
        exploration_type: the exploration type the policy runs under (default RANDOM).
        env_device: device of the env data. policy_device: device the policy runs on.
        storing_device: device of the yielded batches.
        replay_buffer: if given, every batch is written to it and the iterator yields ``None``.
        postproc: a callable applied to each batch before it is yielded or stored.
        return_same_td: yield the collector's batch memory itself (the same TensorDict each
            batch, valid until the next one) instead of a copy the caller owns.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> collector = Collector(CountingEnv(batch_size=(2,)), frames_per_batch=8, total_frames=16)
        >>> [b.batch_size for b in collector]
        [torch.Size([2, 4]), torch.Size([2, 4])]
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: EnvBase | Callable[[], EnvBase],
        policy: Policy | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        max_frames_per_traj: int | None = None,
        init_random_frames: int = 0,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        env_device: torch.device | str | None = None,
        policy_device: torch.device | str | None = None,
        storing_device: torch.device | str | None = None,
        replay_buffer: Any = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        return_same_td: bool = False,
    ) -> None:
        self._owns_env = not isinstance(create_env_fn, EnvBase)
        self.env: EnvBase = create_env_fn() if self._owns_env else create_env_fn  # type: ignore[operator,assignment]
        self.policy = policy
        numel = max(self.env.batch_size.numel(), 1)
        if frames_per_batch <= 0 or frames_per_batch % numel:
            raise ValueError(
                f"Collector.__init__: frames_per_batch must be a positive multiple of the env "
                f"batch numel (got {frames_per_batch}; expected a multiple of {numel})."
            )
        self.frames_per_batch = frames_per_batch
        self.steps_per_batch = frames_per_batch // numel
        self.total_frames = total_frames
        self.max_frames_per_traj = max_frames_per_traj
        self.init_random_frames = init_random_frames
        self._policy_fill: list[tuple[Any, torch.Tensor]] | None = None
        self.reset_at_each_iter = reset_at_each_iter
        self.split_trajs = split_trajs
        self.exploration_type = exploration_type
        self.env_device = torch.device(env_device) if env_device is not None else None
        self.policy_device = torch.device(policy_device) if policy_device is not None else None
        self.storing_device = torch.device(storing_device) if storing_device is not None else None
        self.replay_buffer = replay_buffer
        self.postproc = postproc
        if return_same_td and replay_buffer is not None:
            raise ValueError(
                "Collector.__init__: return_same_td=True cannot be used with a replay_buffer "
                "(got both; expected at most one). The buffer stores copies of each batch: "
                "drop return_same_td."
            )
        self.return_same_td = bool(return_same_td)
        self.frames = 0
        self._root: TensorDictBase | None = None
        self._buffer: RolloutBuffer | None = None
        self._ids = _trajectory_ids(self.env)
        self._traj_steps: torch.Tensor | None = None
        self._numel = max(self.env.batch_size.numel(), 1)
        self._fast_random = type(self.env).rand_action is EnvBase.rand_action
        self._rand_leaves: list[tuple[Any, Any]] = []
        self._shutdown = False

    # ------------------------------------------------------------------ policy
    def _act(self, td: TensorDictBase) -> TensorDictBase:
        if self.policy is None or self.frames < self.init_random_frames:
            if self.policy is not None:
                self._fill_policy_outputs(td)
            if not self._fast_random:
                return self.env.rand_action(td)
            for key, leaf in self._rand_leaves:  # leaf draws: no Composite TensorDict per step
                td.set(key, leaf.rand())
            return td
        if self.policy_device is not None and td.device != self.policy_device:
            out = self.policy(td.to(self.policy_device))
            return out.to(self.env_device) if self.env_device is not None else out
        return self.policy(td)

    def _fill_policy_outputs(self, td: TensorDictBase) -> None:
        """Random-action steps carry zeros where the policy writes other entries.

        The batch layout is fixed by the first step; a dry run of the policy (on a copy) finds
        what it writes (log-probs, action values, next hidden states), so that these entries
        are allocated even when the first frames use random actions.
        """
        if self._policy_fill is None:
            before = set(td.keys(True, True))
            probe = self.policy(td.clone())  # type: ignore[misc]
            self._policy_fill = [
                (key, torch.zeros_like(probe.get(key)))
                for key in probe.keys(True, True)
                if key not in before and key not in self.env.action_keys
            ]
        for key, zeros in self._policy_fill:
            td.set(key, zeros)

    def update_policy_weights_(self, weights: TensorDictBase | dict | None = None) -> None:
        """Copies ``weights`` into the policy in place (a no-op without weights: the policy is
        shared in-process).

        Args:
            weights: a TensorDict shaped like ``TensorDict.from_module(policy)`` (a subset of
                entries is fine) or a ``state_dict``.
        """
        current = policy_weights(self.policy)
        if weights is None or current is None:
            return
        new = as_weights("Collector.update_policy_weights_", weights, current)
        with torch.no_grad():
            current.update_(new)

    # ------------------------------------------------------------------ collection
    def _start(self) -> TensorDictBase:
        root = self.env.reset()
        for ids in self._ids:
            ids.start()
        self._traj_steps = torch.zeros(self.env.batch_size, dtype=torch.long)
        return root

    def _truncate(self, td: TensorDictBase, limit: int) -> None:
        assert self._traj_steps is not None
        self._traj_steps += 1
        cut = self._traj_steps >= limit
        if not cut.any():
            return
        for g in self.env.done_groups:
            for key in (g.done, g.truncated):
                if key is None:
                    continue
                full = ("next", *_tuple(key))
                flag = td.get(full, None)
                if flag is None:
                    continue
                m = cut.reshape(*cut.shape, *([1] * (flag.ndim - cut.ndim)))
                td.set(full, flag | m)

    def _make_buffer(self, td: TensorDictBase) -> RolloutBuffer:
        example = td.clone()
        for ids in self._ids:
            example.set(ids.key, ids.ids)
        buffer = RolloutBuffer(
            example, self.steps_per_batch, self.storing_device, external=[i.key for i in self._ids]
        )
        return buffer

    def _step_once(self, root: TensorDictBase, t: int) -> TensorDictBase:
        td = self.env.step(self._act(root))
        if self.max_frames_per_traj is not None:
            self._truncate(td, self.max_frames_per_traj)
        if self._buffer is None:
            self._buffer = self._make_buffer(td)
        self._buffer.write(td, t, [ids.ids for ids in self._ids])
        nxt = self.env.step_mdp(td)
        member_done = self._ids[0].renew(td)
        if member_done is not None and self._traj_steps is not None:
            self._traj_steps.masked_fill_(member_done, 0)
        for ids in self._ids[1:]:
            ids.renew(td)
        self.frames += self._numel
        return self.env.maybe_reset(nxt)

    def rollout(self) -> TensorDictBase:
        """Collects one batch and returns it (the preallocated memory; see the class docs)."""
        if self._shutdown:
            raise RuntimeError(
                "Collector.rollout: the collector is shut down (got a call after "
                "shutdown()). Build a new collector."
            )
        if self._root is None or self.reset_at_each_iter:
            self._root = self._start()
        root = self._root
        spec = self.env.full_action_spec  # read per batch: transforms may rebuild the specs
        self._rand_leaves = [(key, spec[key]) for key in self.env.action_keys]
        with torch.no_grad(), set_exploration_type(self.exploration_type):
            for t in range(self.steps_per_batch):
                root = self._step_once(root, t)
        self._root = root
        assert self._buffer is not None
        return self._buffer.data

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        return iterate_batches(self, self._owned_rollout)

    def _owned_rollout(self) -> TensorDictBase:
        """One batch for the iterator: a copy unless ``return_same_td`` (or ``split_trajs``,
        whose padded batch is fresh memory already)."""
        batch = self.rollout()
        if self.return_same_td or self.split_trajs:
            return batch
        assert self._buffer is not None
        return self._buffer.clone()

    # ------------------------------------------------------------------ state
    def set_seed(self, seed: int) -> int:
        """Seeds the env (and torch's global generator); returns the env's next seed."""
        torch.manual_seed(seed)
        return self.env.set_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        """Frame counter, trajectory counter, policy weights and env/transform state."""
        state: dict[str, Any] = {
            "frames": self.frames,
            "next_traj_id": self._ids[0].next_id,
            "next_group_traj_ids": [ids.next_id for ids in self._ids[1:]],
        }
        env_state = getattr(self.env, "state_dict", None)
        if callable(env_state):
            state["env"] = env_state()
        if isinstance(self.policy, nn.Module):
            state["policy"] = self.policy.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""
        self.frames = int(state["frames"])
        self._ids[0].next_id = int(state["next_traj_id"])
        for ids, value in zip(self._ids[1:], state.get("next_group_traj_ids", [])):
            ids.next_id = int(value)
        if "env" in state and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
        if "policy" in state and isinstance(self.policy, nn.Module):
            self.policy.load_state_dict(state["policy"])

    def shutdown(self) -> None:
        """Closes the env if the collector built it; idempotent."""
        if self._shutdown:
            return
        self._shutdown = True
        if self._owns_env:
            self.env.close()


class _Iterated(Protocol):
    """What :func:`iterate_batches` reads of a collector."""

    frames: int
    total_frames: int
    split_trajs: bool
    postproc: Callable[[TensorDictBase], TensorDictBase] | None
    replay_buffer: Any


def iterate_batches(
    collector: _Iterated, next_batch: Callable[[], TensorDictBase]
) -> Iterator[TensorDictBase | None]:
    """The collectors' ``__iter__``: batches from ``next_batch`` until ``total_frames``.

    Each batch is split into trajectories (``split_trajs``), post-processed (``postproc``) and
    either yielded or, with a ``replay_buffer``, written to it (then ``None`` is yielded).
    """
    while collector.total_frames < 0 or collector.frames < collector.total_frames:
        batch = next_batch()
        if collector.split_trajs:
            batch = split_trajectories(batch)
        if collector.postproc is not None:
            batch = collector.postproc(batch)
        if collector.replay_buffer is not None:
            collector.replay_buffer.extend(batch.reshape(-1))
            yield None
        else:
            yield batch


def _tuple(key: Any) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


class _TrajIds:
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

    def renew(self, td: TensorDictBase) -> torch.Tensor | None:
        """Gives fresh ids where the group is done; returns the done flags (None if none)."""
        done = _lookup(td, self.done_path, self.done_key)
        if not done.any():
            return None
        done = done.reshape(*self.shape, -1).any(-1)
        n = int(done.sum())
        fresh = torch.arange(self.next_id, self.next_id + n)
        self.ids = self.ids.masked_scatter(done, fresh)
        self.next_id += n
        return done


def _trajectory_ids(env: EnvBase) -> list[_TrajIds]:
    """Ids per env member (from the first done group) at ``("collector", "traj_ids")``, then
    per member of every nested done group at ``(*prefix, "collector", "traj_ids")``."""
    groups = env.done_groups
    out = [_TrajIds(("collector", "traj_ids"), groups[0].done, env.batch_size)]
    spec = env.full_done_spec
    for g in groups:
        if not g.prefix:
            continue
        shape = spec[g.done].shape
        shape = shape[:-1] if shape[-1:] == (1,) else shape
        out.append(_TrajIds((*g.prefix, "collector", "traj_ids"), g.done, shape))
    return out
