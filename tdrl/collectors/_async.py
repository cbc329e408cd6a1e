"""AsyncCollector: one :class:`Collector` in a background process (TorchRL's single-env
asynchronous collector)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tensordict import TensorDictBase

from tdrl.collectors._multi import Device, Policy
from tdrl.collectors._multi_async import MultiAsyncCollector
from tdrl.envs import EnvBase
from tdrl.envs.core._exploration_type import ExplorationType

__all__ = ["AsyncCollector"]


class AsyncCollector(MultiAsyncCollector):
    """Runs one collector in a worker process, which collects the next batch while the caller
    uses the current one.

    A :class:`MultiAsyncCollector` with a single worker: batches have batch
    ``[*env.batch_size, T]`` with ``T = frames_per_batch / env.batch_size.numel()`` and are
    copies the caller owns (``return_same_td=True``: the worker's shared memory, overwritten
    when it collects again). Batches already being collected when ``update_policy_weights_()``
    runs finish with the old weights: the policy in the worker may lag one batch behind the
    trained one, which suits off-policy training. Failures, timeouts and shutdown are as for
    :class:`MultiSyncCollector`.

    Args:
        create_env_fn: a callable returning the env (cloudpickled: lambdas are fine).
        policy: a TensorDict-to-TensorDict callable; random actions when None.
        policy_factory: builds the policy in the worker instead of sending ``policy``.
        frames_per_batch, total_frames, device, storing_device, env_device, policy_device,
            max_frames_per_traj, init_random_frames, reset_at_each_iter, postproc,
            split_trajs, exploration_type, update_at_each_batch, num_sub_threads,
            set_truncated: as for :class:`MultiAsyncCollector`.
        create_env_kwargs: keyword arguments of ``create_env_fn``.
        reset_when_done, preemptive_threshold, num_threads, track_policy_version: accepted at
            their defaults only (see :class:`MultiSyncCollector`).
        **kwargs: any other :class:`MultiAsyncCollector` keyword (``replay_buffer``,
            ``weight_sync_schemes``, ``return_same_td``, ``mp_start_method``, ``options``,
            ...).

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> with AsyncCollector(
        ...     CountingEnv, frames_per_batch=3, total_frames=6, mp_start_method="fork"
        ... ) as collector:
        ...     obs = [batch["observation"][:, 0].tolist() for batch in collector]
        >>> len(collector), obs
        (2, [[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]])
    """

    def __init__(
        self,
        create_env_fn: Callable[..., EnvBase],
        policy: Policy | None = None,
        *,
        policy_factory: Callable[[], Policy] | None = None,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Device = None,
        storing_device: Device = None,
        env_device: Device = None,
        policy_device: Device = None,
        create_env_kwargs: Mapping[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        split_trajs: bool | None = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        reset_when_done: bool = True,
        update_at_each_batch: bool = False,
        preemptive_threshold: float | None = None,
        num_threads: int | None = None,
        num_sub_threads: int = 1,
        set_truncated: bool = False,
        track_policy_version: bool = False,
        **kwargs: Any,
    ) -> None:
        if isinstance(create_env_fn, (list, tuple)) or "num_workers" in kwargs:
            raise TypeError(
                "AsyncCollector.__init__: create_env_fn must be one env factory (got "
                f"{create_env_fn!r}{' and num_workers' if 'num_workers' in kwargs else ''}; "
                "expected a callable returning an EnvBase). Use MultiAsyncCollector for "
                "several workers."
            )
        super().__init__(
            [create_env_fn],
            policy,
            policy_factory=policy_factory,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            device=device,
            storing_device=storing_device,
            env_device=env_device,
            policy_device=policy_device,
            create_env_kwargs=[create_env_kwargs] if create_env_kwargs else None,
            max_frames_per_traj=max_frames_per_traj,
            init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter,
            postproc=postproc,
            split_trajs=split_trajs,
            exploration_type=exploration_type,
            reset_when_done=reset_when_done,
            update_at_each_batch=update_at_each_batch,
            preemptive_threshold=preemptive_threshold,
            num_threads=num_threads,
            num_sub_threads=num_sub_threads,
            set_truncated=set_truncated,
            track_policy_version=track_policy_version,
            **kwargs,
        )
