"""The batched specs of a batched env from its sub-envs' metadata.

Sub-envs built with per-worker arguments may have specs that differ in their values only (the
bounds of a ``StepCounter(max_steps)``, of a Box whose limits depend on a parameter): as in
TorchRL, the batched spec then stacks them, so row ``i`` holds sub-env ``i``'s bounds. Specs that
differ in anything else (keys, classes, shapes, dtypes, batch size, device) are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tdrl.envs.core import EnvMeta
from tdrl.specs import Composite, Stacked, stack_specs

__all__ = ["KINDS", "batched_specs"]

KINDS = ("observation", "action", "reward", "done", "state")


def _layout(meta: EnvMeta) -> tuple:
    """What must match between sub-envs: everything but the specs' values."""
    leaves = []
    for kind in KINDS:
        spec = meta.specs[kind]
        for key in sorted(spec.keys(True, True), key=str):
            leaf = spec[key]
            leaves.append((kind, key, type(leaf), leaf.shape, leaf.dtype, leaf.device))
    return (meta.batch_size, meta.device, tuple(leaves))


def batched_specs(owner: str, metas: Sequence[EnvMeta], shape: torch.Size) -> dict[str, Composite]:
    """The five full specs of the batched env (leading dims ``shape``).

    Raises:
        ValueError: a sub-env's specs differ from sub-env 0's in more than their values.

    Examples:
        >>> from tdrl.testing import CountingEnv
        >>> metas = [EnvMeta.from_env(CountingEnv()) for _ in range(2)]
        >>> batched_specs("SerialEnv", metas, torch.Size([2]))["observation"].shape
        torch.Size([2])
    """
    first = metas[0]
    diffs = [first.difference(meta) for meta in metas]
    if all(d is None for d in diffs):
        return {kind: first.specs[kind].expand(shape) for kind in KINDS}
    layout = _layout(first)
    for i, (meta, diff) in enumerate(zip(metas, diffs)):
        if diff is not None and _layout(meta) != layout:
            raise ValueError(
                f"{owner}.__init__: sub-env {i} does not have the specs of sub-env 0 (got "
                f"{diff}). Every factory must build envs with identical specs (their values, "
                "e.g. bounds, may differ)."
            )
    try:
        stacked = {kind: stack_specs([m.specs[kind] for m in metas]) for kind in KINDS}
    except (RuntimeError, ValueError, TypeError) as err:
        raise ValueError(
            f"{owner}.__init__: the sub-envs' specs differ and cannot be stacked (got "
            f"{next(d for d in diffs if d is not None)}; {err}). Build envs with identical "
            "specs."
        ) from err
    out: dict[str, Composite] = {}
    for kind, spec in stacked.items():
        # per-row values only: one plain Composite of plain leaves (a Stacked leaf or a
        # StackedComposite means shapes or n differ, which a batched env cannot hold)
        leaves = spec.values(True, True) if isinstance(spec, Composite) else ()
        if type(spec) is not Composite or any(isinstance(v, Stacked) for v in leaves):
            raise ValueError(
                f"{owner}.__init__: the sub-envs' {kind} specs differ and cannot be stacked into "
                f"one spec (got {next(d for d in diffs if d is not None)}). Build envs with "
                "identical specs (only their values, e.g. bounds, may differ)."
            )
        out[kind] = spec
    return out
