"""What a Collector does with its arguments before the first batch, as TorchRL's does:
``max_frames_per_traj`` (a ``StepCounter``), the rounding of ``frames_per_batch``, the
warnings about frame counts, and whether the policy runs once at construction."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from tdrl.envs import EnvBase, StepCounter, TransformedEnv

__all__ = [
    "calls_policy_at_start",
    "materialize_lazy",
    "round_frames",
    "warn_frame_counts",
    "with_step_counter",
]


def with_step_counter(owner: str, env: EnvBase, max_frames_per_traj: int) -> EnvBase:
    """``env`` in a ``TransformedEnv`` with ``StepCounter(max_steps=max_frames_per_traj)``
    (``env`` itself for a value <= 0: no limit). The env must not count steps already."""
    if max_frames_per_traj <= 0:
        return env
    counted = [
        key
        for key in env.full_observation_spec.keys(True, True)
        if "step_count" in ((key,) if isinstance(key, str) else key)
    ]
    if counted:
        raise ValueError(
            f"{owner}: the env counts steps already (got the entries {counted} and "
            f"max_frames_per_traj={max_frames_per_traj}; expected no 'step_count' entry). Pass "
            "max_frames_per_traj=0 and give the env's StepCounter a max_steps instead."
        )
    return TransformedEnv(env, StepCounter(max_steps=max_frames_per_traj))


def round_frames(owner: str, frames_per_batch: int, numel: int, what: str) -> int:
    """``frames_per_batch`` rounded up to a multiple of ``numel`` (with a warning when it is
    not one), as a count of ``numel``-sized steps."""
    if not isinstance(frames_per_batch, int) or isinstance(frames_per_batch, bool):
        raise TypeError(
            f"{owner}: frames_per_batch must be an int (got {frames_per_batch!r}). Pass the "
            "number of frames of a batch."
        )
    if frames_per_batch <= 0:
        raise ValueError(
            f"{owner}: frames_per_batch must be positive (got {frames_per_batch}). Pass the "
            "number of frames of a batch."
        )
    steps = -(-frames_per_batch // numel)
    if steps * numel != frames_per_batch:
        warnings.warn(
            f"{owner}: frames_per_batch ({frames_per_batch}) is not a multiple of {what} "
            f"({numel}): each batch holds {steps * numel} frames.",
            UserWarning,
            stacklevel=3,
        )
    return steps


def warn_frame_counts(
    owner: str, total_frames: int, init_random_frames: int, frames_per_batch: int
) -> None:
    """TorchRL's warnings: ``total_frames`` and ``init_random_frames`` are counted in whole
    batches, so values that are not multiples of ``frames_per_batch`` collect more."""
    if total_frames > 0 and total_frames % frames_per_batch:
        more = frames_per_batch - total_frames % frames_per_batch
        warnings.warn(
            f"{owner}: total_frames ({total_frames}) is not a multiple of frames_per_batch "
            f"({frames_per_batch}): {more} more frames are collected.",
            UserWarning,
            stacklevel=3,
        )
    if init_random_frames > 0 and init_random_frames % frames_per_batch:
        whole = -(-init_random_frames // frames_per_batch) * frames_per_batch
        warnings.warn(
            f"{owner}: init_random_frames ({init_random_frames}) is not a multiple of "
            f"frames_per_batch ({frames_per_batch}): the first {whole} frames use random "
            "actions.",
            UserWarning,
            stacklevel=3,
        )


def calls_policy_at_start(policy: Any, env: EnvBase, has_buffer: bool) -> bool:
    """Whether TorchRL's collector runs ``policy`` once at construction to learn its outputs.

    It does, except when a replay buffer is given and the policy names its ``out_keys``, or
    when the policy's ``spec`` is complete, holds an entry the env does not write and covers
    every out key.
    """
    out_keys = list(getattr(policy, "out_keys", None) or ())
    if has_buffer:
        return not out_keys
    spec: Any = getattr(policy, "spec", None)
    if spec is None:
        return True
    try:
        spec_keys = list(spec.keys(True, True))
        complete = all(spec[k] is not None for k in spec_keys)
    except (AttributeError, KeyError, TypeError):  # not a Composite
        complete = False
    if not complete:
        return True
    env_keys = set(env.fake_tensordict().keys(True, True))
    covered = set(spec_keys) if any(k not in env_keys for k in spec_keys) else set()
    return any(k not in covered for k in out_keys)


def materialize_lazy(policy: Any, make_env: Any) -> None:
    """Runs ``policy`` once on zeros shaped like the data of ``make_env()`` when it has lazy
    (uninitialized) parameters, so that they exist before the policy's weights are shared."""
    if not isinstance(policy, nn.Module):
        return
    lazy = nn.parameter.UninitializedParameter, nn.parameter.UninitializedBuffer
    if not any(isinstance(t, lazy) for t in (*policy.parameters(), *policy.buffers())):
        return
    env = make_env()
    try:
        with torch.no_grad():
            policy(env.fake_tensordict())
    finally:
        env.close()
