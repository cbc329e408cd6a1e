"""Collector: runs a policy in an env and yields ``[*env.batch_size, T]`` batches."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.collectors._base import BaseCollector, iterate_batches
from tdrl.collectors._buffer import RolloutBuffer
from tdrl.collectors._rows import CollectorRows
from tdrl.collectors._settings import (
    build_env,
    compiled_call,
    policy_outputs,
    resolve_devices,
    resolve_policy,
    truncated_keys,
)
from tdrl.collectors._startup import (
    calls_policy_at_start,
    round_frames,
    warn_frame_counts,
    with_step_counter,
)
from tdrl.collectors._traj_ids import trajectory_ids
from tdrl.collectors._trajs import check_trajectory_args
from tdrl.collectors._unsupported import check_supported
from tdrl.collectors._weight_sync import as_weights, policy_weights
from tdrl.envs import EnvBase
from tdrl.envs.core import RandomPolicy
from tdrl.envs.core._exploration_type import ExplorationType, set_exploration_type
from tdrl.envs.core._fast import put
from tdrl.envs.core._keys import key_tuple

__all__ = ["Collector"]

Policy = Callable[[TensorDictBase], TensorDictBase]
Device = torch.device | str | int | None


class Collector(BaseCollector):
    """Collects batches of transitions from one (possibly batched) env with a policy.

    Iterating yields TensorDicts of batch ``[*env.batch_size, T]`` (time last), each step
    holding the root entries the policy saw and wrote and ``"next"``, plus trajectory ids at
    ``("collector", "traj_ids")`` that stay unique across batches and envs. As in TorchRL,
    ``frames_per_batch`` is rounded up to a multiple of the env batch numel (with a warning):
    :attr:`frames_per_batch` then holds ``T`` and :attr:`requested_frames_per_batch` the
    frames of a batch. The batch memory is allocated once and written in place; iterating
    yields a copy of it that the caller owns (``list(collector)`` keeps every batch, and keys
    written into a batch never reach the next one). With ``return_same_td=True`` the iterator
    yields the collector's own memory instead (the same TensorDict every time, overwritten by
    the next batch), which spares one copy per batch. :meth:`rollout` always returns that
    memory. ``len(collector)`` is the number of batches, ``ceil(total_frames /
    requested_frames_per_batch)`` (a ``TypeError`` without ``total_frames``).

    As in TorchRL, the constructor resets the env (the first batch starts from that reset,
    and ids start at 0) and then runs the policy once, under ``torch.no_grad`` and outside
    any exploration-type block, on a copy of the reset data, which materialises lazy layers
    and draws from torch's generator as TorchRL's collector does (TorchRL skips that call
    when a ``replay_buffer`` is given and the policy has ``out_keys``; so does tdrl). Without
    a policy, one random action is drawn from the action spec instead. Every batch then runs
    the policy under ``exploration_type``.

    As in TorchRL, the steps of a batch are kept by reference and copied into the batch memory
    once the batch is complete: an env or a policy must return fresh tensors at every step (tdrl
    envs and TensorDict modules do). One that writes into tensors it returned at an earlier step,
    or a policy editing the entries it reads in place, changes the earlier steps of the batch
    too (a step's ``"next"`` tensors are the next step's root tensors).

    With ``trajs_per_batch`` the iterator yields batches of that many complete trajectories
    (each ending with a ``done`` step) instead, reassembled across the fixed-frame batches;
    unfinished ones wait for their end. ``traj_format="padded"`` (default) gives
    ``[trajs_per_batch, max_len]`` zero-padded with a ``("collector", "mask")``, ``"cat"``
    the trajectories one after the other (``[sum of lengths]``). With a ``replay_buffer`` the
    complete trajectories are written to it flat instead (``trajs_per_write`` per
    ``extend``, default: all that completed in the batch) and ``None`` is yielded per batch.

    :meth:`start` collects in a background thread into the ``replay_buffer`` until
    ``total_frames`` or :meth:`async_shutdown`.

    The signature is TorchRL's. Arguments tdrl cannot honour are accepted at their defaults
    only and raise ``ValueError`` otherwise: ``backend``, ``backend_options``,
    ``num_collectors``, ``sync``, ``track_traj_ids``, ``reset_when_done``, ``interruptor``,
    ``use_buffers`` (False), ``extend_buffer`` (False), ``trust_policy`` (False),
    ``cudagraph_policy``, ``weight_updater``, ``weight_sync_schemes``, ``weight_recv_schemes``,
    ``track_policy_version``, ``worker_idx``, ``auto_register_policy_transforms`` and
    ``compact_obs``.

    Args:
        create_env_fn: an env, or a callable returning one (called with ``create_env_kwargs``).
        policy: a TensorDict-to-TensorDict callable writing the actions; random actions from the
            action spec (masks honoured) when None. A ``RandomPolicy()`` without a spec takes
            the env's ``full_action_spec``.
        policy_factory: a callable returning the policy (instead of ``policy``).
        frames_per_batch: frames per batch (rounded up to a multiple of the env batch numel).
        total_frames: stop after this many frames (-1 or None: never stop); counted in whole
            batches.
        device: the default of ``storing_device`` and ``policy_device`` (the env keeps its
            device, see ``env_device``).
        storing_device: device of the yielded batches (default: the env data's).
        policy_device: device the policy runs on; an ``nn.Module`` policy elsewhere is copied
            there (``update_policy_weights_()`` then copies the original's weights in).
        env_device: device of the env data (default: the env's device). tdrl envs cannot be
            moved (TorchRL casts them): another device than the env's is an error. Data is
            moved between the policy and the env when their devices differ.
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        max_frames_per_traj: a positive value wraps the env in a ``TransformedEnv`` with a
            ``StepCounter(max_steps=max_frames_per_traj)``: ``"step_count"`` (int64, root and
            ``"next"``) counts the steps, and trajectories reaching the limit are truncated
            (``truncated`` and ``done`` set) and reset. None, 0 or a negative value: no limit.
            The env must not count steps already (a ``"step_count"`` entry is an error).
        init_random_frames: whole batches use random actions while fewer frames than this
            were collected (with a ``replay_buffer``: written to it); None or -1: none.
        reset_at_each_iter: reset every env at the start of each batch.
        postproc: a callable applied to each batch before it is yielded or stored.
        split_trajs: yield ``[num_trajs, max_len]`` padded trajectories with a
            ``("collector", "mask")`` (None: False; see :func:`split_trajectories`).
        exploration_type: the exploration type the policy runs under (None: RANDOM).
        return_same_td: yield the collector's batch memory itself (the same TensorDict each
            batch, valid until the next one) instead of a copy the caller owns.
        set_truncated: mark the last step of every batch ``truncated`` (and ``done``); the env
            needs a ``truncated`` entry.
        replay_buffer: if given, every batch is written to it and the iterator yields ``None``.
        compile_policy: ``True`` or a dict of ``torch.compile`` keyword arguments: the policy
            call is compiled after ``warmup`` (default 1) eager calls (the construction call
            is one of them).
        no_cuda_sync: accepted (tdrl collectors never synchronise CUDA explicitly).
        trajs_per_batch: yield batches of this many complete trajectories (see above).
        trajs_per_write: with ``trajs_per_batch`` and a ``replay_buffer``: trajectories per
            ``extend``.
        traj_format: with ``trajs_per_batch``: ``"padded"`` (None) or ``"cat"``.
        pre_collect_hook: called with no argument before each batch is collected.
        post_collect_hook: called with each batch before it is yielded or stored.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> collector = Collector(CountingEnv(batch_size=(2,)), frames_per_batch=8, total_frames=16)
        >>> len(collector), [b.batch_size for b in collector]
        (2, [torch.Size([2, 4]), torch.Size([2, 4])])
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: EnvBase | Callable[..., EnvBase],
        policy: Policy | None = None,
        *,
        policy_factory: Callable[[], Policy] | None = None,
        backend: Any = None,
        backend_options: Any = None,
        num_collectors: int | None = None,
        sync: bool | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Device = None,
        storing_device: Device = None,
        policy_device: Device = None,
        env_device: Device = None,
        create_env_kwargs: Mapping[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        track_traj_ids: bool = True,
        exploration_type: ExplorationType | None = ExplorationType.RANDOM,
        return_same_td: bool = False,
        reset_when_done: bool = True,
        interruptor: Any = None,
        set_truncated: bool = False,
        use_buffers: bool | None = None,
        replay_buffer: Any = None,
        extend_buffer: bool = True,
        trust_policy: bool | None = None,
        compile_policy: bool | Mapping[str, Any] | None = None,
        cudagraph_policy: Any = None,
        no_cuda_sync: bool = False,
        weight_updater: Any = None,
        weight_sync_schemes: Any = None,
        weight_recv_schemes: Any = None,
        track_policy_version: bool = False,
        worker_idx: int | None = None,
        trajs_per_batch: int | None = None,
        trajs_per_write: int | None = None,
        traj_format: str | None = None,
        auto_register_policy_transforms: bool | None = None,
        pre_collect_hook: Callable[[], Any] | None = None,
        post_collect_hook: Callable[[TensorDictBase], Any] | None = None,
        compact_obs: bool = False,
    ) -> None:
        owner = "Collector.__init__"
        self._shutdown = True  # until built: shutdown() must then do nothing
        check_supported(
            owner,
            {
                "backend": backend,
                "backend_options": backend_options,
                "num_collectors": num_collectors,
                "sync": sync,
                "track_traj_ids": track_traj_ids,
                "reset_when_done": reset_when_done,
                "interruptor": interruptor,
                "use_buffers": use_buffers,
                "extend_buffer": extend_buffer,
                "trust_policy": trust_policy,
                "cudagraph_policy": cudagraph_policy,
                "weight_updater": weight_updater,
                "weight_recv_schemes": weight_recv_schemes,
                "track_policy_version": track_policy_version,
                "worker_idx": worker_idx,
                "auto_register_policy_transforms": auto_register_policy_transforms,
                "compact_obs": compact_obs,
            },
        )
        if weight_sync_schemes is not None:
            raise ValueError(
                f"{owner}: weight_sync_schemes is for the multi-process collectors (got "
                f"{weight_sync_schemes!r}; expected None). The Collector runs the policy in "
                "this process: update_policy_weights_() needs no scheme."
            )
        if return_same_td and replay_buffer is not None:
            raise ValueError(
                f"{owner}: return_same_td=True cannot be used with a replay_buffer (got both; "
                "expected at most one). The buffer stores copies of each batch: drop "
                "return_same_td."
            )
        self.traj_format = check_trajectory_args(
            owner, trajs_per_batch, trajs_per_write, traj_format, bool(split_trajs)
        )
        self.trajs_per_batch, self.trajs_per_write = trajs_per_batch, trajs_per_write
        env, self._owns_env = build_env(owner, create_env_fn, create_env_kwargs)
        self.env = env
        self._shutdown = False
        self.max_frames_per_traj = int(max_frames_per_traj or 0)
        self.env = with_step_counter(owner, env, self.max_frames_per_traj)
        numel = max(self.env.batch_size.numel(), 1)
        self.frames_per_batch = round_frames(owner, frames_per_batch, numel, "the env batch numel")
        self.requested_frames_per_batch = self.frames_per_batch * numel
        self.total_frames = -1 if total_frames is None else int(total_frames)
        self.init_random_frames = int(init_random_frames or 0)
        warn_frame_counts(owner, self.total_frames, self.init_random_frames, frames_per_batch)
        self._policy_fill: list[tuple[Any, torch.Tensor]] | None = None
        self.reset_at_each_iter = bool(reset_at_each_iter)
        self.split_trajs = bool(split_trajs)
        self.exploration_type = exploration_type or ExplorationType.RANDOM
        self.env_device, self.policy_device, self.storing_device = resolve_devices(
            owner, self.env, device, storing_device, policy_device, env_device
        )
        self._set_policy(resolve_policy(owner, policy, policy_factory), compile_policy)
        self.replay_buffer = replay_buffer
        self.postproc = postproc
        self.return_same_td = bool(return_same_td)
        self.set_truncated = bool(set_truncated)
        self._truncated_keys = truncated_keys(owner, self.env) if set_truncated else []
        self.no_cuda_sync = bool(no_cuda_sync)
        super().__init__(pre_collect_hook=pre_collect_hook, post_collect_hook=post_collect_hook)
        self.frames = 0
        self._buffer: RolloutBuffer | None = None
        self._ids = trajectory_ids(self.env)
        self._numel = numel
        self._fast_random = type(self.env).rand_action is EnvBase.rand_action
        self._rand_leaves: list[tuple[Any, Any]] = []
        self._random_batch = self.policy is None
        with torch.no_grad():
            self._root: TensorDictBase = self._start()
            self._first_policy_call()

    def _set_policy(self, policy: Policy | None, compile_policy: Any) -> None:
        """Keeps ``policy`` (a copy on ``policy_device`` when its weights are elsewhere) and
        the callable that runs it (compiled when asked)."""
        self._policy_source: nn.Module | None = None
        if isinstance(policy, RandomPolicy):  # RandomPolicy() takes the env's action spec
            policy.set_action_spec_from_env(self.env)
        target = self.policy_device
        if isinstance(policy, nn.Module) and target is not None:
            weights = policy_weights(policy)
            if weights is not None and any(t.device != target for t in weights.values(True, True)):
                self._policy_source = policy
                policy = copy.deepcopy(policy).to(target)
        self.policy = policy
        self._policy_call = compiled_call("Collector.__init__", policy, compile_policy)

    # ------------------------------------------------------------------ policy
    def _first_policy_call(self) -> None:
        """TorchRL's construction-time policy call (see the class docs): runs the policy on a
        copy of the reset data and keeps zeros of what it writes besides the actions, which
        random-action steps carry."""
        if self.policy is None:
            self.env.full_action_spec.rand()  # TorchRL's RandomPolicy(action spec) runs here
            return
        if not calls_policy_at_start(self.policy, self.env, self.replay_buffer is not None):
            return
        td = self._root.copy()
        if self.policy_device is not None and td.device != self.policy_device:
            td = td.to(self.policy_device)
        before = set(td.keys(True, True))
        assert self._policy_call is not None
        out = self._policy_call(td)
        actions = set(self.env.action_keys)
        self._policy_fill = [
            (key, torch.zeros_like(out.get(key)))
            for key in out.keys(True, True)
            if key not in before and key not in actions
        ]

    def _use_random_frames(self) -> bool:
        """Whether the next batch takes random actions: TorchRL counts ``init_random_frames``
        in whole batches, against the replay buffer's ``write_count`` when there is one."""
        if self.policy is None:
            return True
        if self.init_random_frames <= 0:
            return False
        done = getattr(self.replay_buffer, "write_count", self.frames)
        return int(done) < self.init_random_frames

    def _act(self, td: TensorDictBase) -> TensorDictBase:
        if self._random_batch:
            if self.policy is not None:
                self._fill_policy_outputs(td)
            if not self._fast_random:
                return self.env.rand_action(td)
            for path, leaf in self._rand_leaves:  # leaf draws: no Composite TensorDict per step
                put(td, path, leaf.rand())
            return td
        call = self._policy_call
        assert call is not None
        if self.policy_device is not None and td.device != self.policy_device:
            out = call(td.to(self.policy_device))
            return out.to(self.env_device) if self.env_device is not None else out
        return call(td)

    def _fill_policy_outputs(self, td: TensorDictBase) -> None:
        """Random-action steps carry zeros where the policy writes other entries.

        The batch layout is fixed by the first step; a dry run of the policy (on a copy) finds
        what it writes (log-probs, action values, next hidden states), so that these entries
        are allocated even when the first frames use random actions.
        """
        if self._policy_fill is None:
            self._policy_fill = policy_outputs(self.policy, td, self.env.action_keys)
        for key, zeros in self._policy_fill:
            td.set(key, zeros)

    def _push_weights(self, weights: Any, worker_ids: list[int] | None) -> None:
        """``update_policy_weights_``: copies ``weights`` into the policy in place. Without
        weights this is a no-op when the policy is shared in-process, and copies the given
        policy's current weights when the collector runs a copy of it on ``policy_device``.
        The Collector is its only worker (``worker_ids`` 0)."""
        current = policy_weights(self.policy)
        if weights is None and self._policy_source is not None:
            weights = policy_weights(self._policy_source)
        if weights is None or current is None:
            return
        new = as_weights("Collector.update_policy_weights_", weights, current)
        with torch.no_grad():
            current.update_(new)

    # ------------------------------------------------------------------ collection
    def _start(self) -> TensorDictBase:
        """Resets every env; the trajectories that start get fresh ids."""
        root = self.env.reset()
        for ids in self._ids:
            ids.start()
        return root

    def _make_buffer(self, td: TensorDictBase) -> RolloutBuffer:
        example = td.clone()
        for ids in self._ids:
            example.set(ids.key, ids.ids)
        buffer = RolloutBuffer(
            example, self.frames_per_batch, self.storing_device, external=[i.key for i in self._ids]
        )
        return buffer

    def _step_once(
        self, root: TensorDictBase, t: int, acted: TensorDictBase | None = None
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step ``t`` of the batch (``acted``: the policy's output when it already ran);
        returns the step's data and the next root."""
        td = self.env.step(self._act(root) if acted is None else acted)
        if self._buffer is None:
            self._buffer = self._make_buffer(td)
        self._buffer.record(td, t, [ids.ids for ids in self._ids])
        nxt = self.env.step_mdp(td)
        for ids in self._ids:
            ids.renew(td)
        self.frames += self._numel
        return td, self.env.maybe_reset(nxt)

    def _steps(self, root: TensorDictBase) -> tuple[TensorDictBase, CollectorRows | None]:
        """The steps of one batch; returns the next root and the row steps to finish after
        ``flush`` (None when the general loop ran every step; see ``CollectorRows``)."""
        td, root = self._step_once(root, 0)
        rows = CollectorRows.start(self, td, root)
        t, acted = 1, None
        if rows is not None:
            root, t, acted = rows.collect(root)
            if acted is not None:
                rows = None
        for i in range(t, self.frames_per_batch):
            _, root = self._step_once(root, i, acted if i == t else None)
        return root, rows

    def rollout(self) -> TensorDictBase:
        """Collects one batch and returns it (the preallocated memory; see the class docs)."""
        with self._lock:
            return self._rollout()

    def _rollout(self) -> TensorDictBase:
        self._check_open("rollout")
        if self.pre_collect_hook is not None:
            self.pre_collect_hook()
        if self.reset_at_each_iter:
            with torch.no_grad():
                self._root = self._start()
        root = self._root
        self._random_batch = self._use_random_frames()
        spec = self.env.full_action_spec  # read per batch: transforms may rebuild the specs
        self._rand_leaves = [(key_tuple(key), spec[key]) for key in self.env.action_keys]
        with torch.no_grad(), set_exploration_type(self.exploration_type):
            root, rows = self._steps(root)
        self._root = root
        assert self._buffer is not None
        self._buffer.flush()
        data = self._buffer.data
        if rows is not None:
            rows.finish(data)
        dim = len(self.env.batch_size)
        for keys in self._truncated_keys:  # set_truncated: the batch ends every trajectory
            for key in keys:
                data.get(("next", *key)).select(dim, -1).fill_(True)
        return data

    def iterator(self) -> Iterator[TensorDictBase | None]:
        """The batches until ``total_frames`` (what ``for batch in collector`` runs)."""
        return iterate_batches(self, self._owned_rollout, self.post_collect_hook)

    def _owned_rollout(self) -> TensorDictBase:
        """One batch for the iterator: a copy unless ``return_same_td`` (or ``split_trajs``,
        whose padded batch is fresh memory already)."""
        batch = self.rollout()
        if self.return_same_td or self.split_trajs:
            return batch
        assert self._buffer is not None
        return self._buffer.clone()

    # ------------------------------------------------------------------ state
    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seeds the env; returns the env's next seed (``seed`` itself with ``static_seed``).

        As in TorchRL, torch's generator is left alone (seed it with ``torch.manual_seed``)
        and the envs are not reset: the next batch goes on from the current data (the
        constructor's reset for a new collector); call :meth:`reset` to start from the seed.
        """
        out = self.env.set_seed(seed, static_seed=static_seed)
        return seed if out is None else int(out)

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

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        """Restores what ``state_dict`` returned; the trajectories in progress continue with
        fresh ids drawn from the restored counters (the envs are not reset), as in TorchRL.
        ``strict`` goes to the env's and the policy's ``load_state_dict``."""
        state = state_dict
        self.frames = int(state["frames"])
        self._ids[0].next_id = int(state["next_traj_id"])
        for ids, value in zip(self._ids[1:], state.get("next_group_traj_ids", [])):
            ids.next_id = int(value)
        for ids in self._ids:  # as TorchRL: the current trajectories get ids after the restored
            ids.start()
        if "env" in state and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"], strict=strict)
        if "policy" in state and isinstance(self.policy, nn.Module):
            self.policy.load_state_dict(state["policy"], strict=strict)

    def reset(self, index: Any = None, **kwargs: Any) -> None:
        """Resets the envs: the next batch starts from fresh trajectories with new
        ``("collector", "traj_ids")``.

        With ``trajs_per_batch``, a full reset drops the trajectories not yielded yet, a
        partial one the unfinished trajectories of the envs it resets.

        Args:
            index: an index into the env batch (an int, slice, mask, ...): only those envs
                are reset, the others continue their trajectories. None: reset every env.
            **kwargs: refused (tdrl's ``env.reset`` takes no keyword arguments).

        Raises:
            ValueError: an ``index`` for an env with batch size ``()``, or keyword arguments.
        """
        with self._lock:  # not while start()'s thread collects a batch
            self._reset(index, kwargs)

    def _reset(self, index: Any, kwargs: dict[str, Any]) -> None:
        self._check_open("reset")
        if kwargs:
            raise ValueError(
                f"Collector.reset: tdrl envs reset without keyword arguments (got "
                f"{sorted(kwargs)}). Put what _reset reads into the env or its data."
            )
        if index is not None and not self.env.batch_size:
            raise ValueError(
                f"Collector.reset: the env has batch size () (got index={index!r}; expected "
                "None). Reset the single env with reset()."
            )
        assembler = self._assembler
        if index is None:
            with torch.no_grad():
                self._root = self._start()
            if assembler is not None:  # trajs_per_batch: nothing collected before is yielded
                assembler.flush()
            return
        mask = torch.zeros(self.env.batch_size, dtype=torch.bool)
        mask[index] = True
        root = self._root.clone(False).set("_reset", mask.to(self._root.device))
        with torch.no_grad():
            self._root = self.env.reset(root)
        abandoned = self._ids[0].ids[mask].tolist()
        for ids in self._ids:
            ids.restart(mask)
        if assembler is not None:  # the abandoned episodes never complete
            assembler.flush(abandoned)

    def _check_open(self, method: str) -> None:
        if self._shutdown:
            raise RuntimeError(
                f"Collector.{method}: the collector is shut down (got a call after "
                "shutdown()). Build a new collector."
            )

    def shutdown(
        self, timeout: float | None = None, close_env: bool = True, raise_on_error: bool = True
    ) -> None:
        """Stops the background collection of :meth:`start` and closes the env if the
        collector built it; idempotent.

        Args:
            timeout: seconds to wait for the background thread (None: until it stops, or a
                number >= 0).
            close_env: close the env the collector built from ``create_env_fn``; False leaves
                it open. An env instance passed in belongs to the caller and stays open.
            raise_on_error: raise what closing the env raised; False swallows it.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError(
                f"Collector.shutdown: timeout must be None or >= 0 seconds (got {timeout!r})."
            )
        if self._shutdown:
            return
        self._stop_background(timeout)
        self._shutdown = True
        if close_env and self._owns_env:
            try:
                self.env.close()
            except Exception:
                if raise_on_error:
                    raise
