"""TorchRL collector arguments that tdrl accepts by name but cannot honour (beyond the default).

Each entry names the values tdrl accepts (the TorchRL default and what tdrl does anyway) and why
any other value is refused: such arguments raise instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["UNSUPPORTED", "check_supported"]

_NO_DIST = "this collector runs in this process; Ray actors are tdrl.distributed.RayCollector's"
_NO_TRAJ = "tdrl collects fixed-length [*env.batch_size, T] batches, not whole trajectories"

#: argument -> (accepted values, why other values are refused)
UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "backend": (
        (None,),
        f"{_NO_DIST} (local worker processes: MultiSyncCollector/MultiAsyncCollector)",
    ),
    "backend_options": ((None,), _NO_DIST),
    "num_collectors": (
        (None,),
        "a tdrl constructor never returns another type; build a MultiSyncCollector or "
        "MultiAsyncCollector",
    ),
    "sync": ((None,), "build a MultiSyncCollector or MultiAsyncCollector"),
    "track_traj_ids": ((True,), 'trajectory ids are always written at ("collector", "traj_ids")'),
    "reset_when_done": ((True,), "done envs are always reset (TorchRL refuses False as well)"),
    "interruptor": ((None,), "tdrl collectors have no preemption"),
    "preemptive_threshold": ((None,), "tdrl collectors have no preemption"),
    "use_buffers": (
        (None, True),
        "tdrl always collects into preallocated buffers; entries whose shapes change between "
        "steps are not supported",
    ),
    "extend_buffer": ((True,), "a replay buffer is always extended with whole batches"),
    "trust_policy": (
        (None, True),
        "tdrl never wraps or checks the policy; pass a TensorDict-to-TensorDict callable",
    ),
    "cudagraph_policy": ((None, False), "CUDA-graph capture of the policy is not implemented"),
    "weight_updater": ((None,), "pass weight_sync_schemes (multi-process collectors)"),
    "weight_recv_schemes": ((None,), _NO_DIST),
    "track_policy_version": ((False,), "policy-version tagging is not implemented"),
    "worker_idx": ((None,), _NO_DIST),
    "trajs_per_batch": ((None,), _NO_TRAJ),
    "trajs_per_write": ((None,), _NO_TRAJ),
    "traj_format": ((None,), _NO_TRAJ),
    "auto_register_policy_transforms": (
        (None, False),
        "tdrl registers no transforms from policies",
    ),
    "compact_obs": ((False,), "compact observation storage is not implemented"),
    "collector_class": ((None,), "tdrl workers always run tdrl's Collector"),
    "num_threads": (
        (None,),
        "tdrl never changes this process's thread count; call torch.set_num_threads yourself",
    ),
    "init_fn": ((None,), "worker init functions are not implemented; build state in the env"),
}


def check_supported(
    owner: str,
    values: Mapping[str, Any],
    table: Mapping[str, tuple[tuple[Any, ...], str]] | None = None,
) -> None:
    """Raises ``ValueError`` for the first argument of ``values`` tdrl cannot honour
    (``table``: argument -> (accepted values, why others are refused); default: the
    collectors' table).

    Examples:
        >>> check_supported("Collector.__init__", {"reset_when_done": True})
        >>> check_supported("Collector.__init__", {"reset_when_done": False})
        Traceback (most recent call last):
        ...
        ValueError: Collector.__init__: reset_when_done=False is not supported by tdrl (got False; expected one of (True,)): done envs are always reset (TorchRL refuses False as well). Leave reset_when_done at its default.
    """
    table = UNSUPPORTED if table is None else table
    for name, value in values.items():
        accepted, why = table[name]
        if any(value is a or (type(value) is type(a) and value == a) for a in accepted):
            continue
        raise ValueError(
            f"{owner}: {name}={value!r} is not supported by tdrl (got {value!r}; expected one of "
            f"{accepted}): {why}. Leave {name} at its default."
        )
