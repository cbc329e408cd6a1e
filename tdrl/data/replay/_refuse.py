"""The error tdrl raises for TorchRL arguments it accepts only at their default."""

from __future__ import annotations

from typing import Any

__all__ = ["refuse_unsupported"]


def refuse_unsupported(owner: str, **args: tuple[Any, Any]) -> None:
    """Raises for TorchRL arguments tdrl cannot honour, given with a non-default value.

    Each keyword maps to ``(value, allowed)``; ``allowed`` is the default or a tuple of accepted
    values.
    """
    for arg, (value, allowed) in args.items():
        accepted = allowed if isinstance(allowed, tuple) else (allowed,)
        if not any(value is a or (a is not None and value == a) for a in accepted):
            raise ValueError(
                f"{owner}: {arg} is not supported by tdrl (got {value!r}; expected "
                f"{' or '.join(repr(a) for a in accepted)}). {_WHY.get(arg, 'Leave it at its default')}."
            )


_WHY = {
    "sample_unit": "Use a SliceSampler for windows of steps",
    "dim_extend": "Lay data out [env, time] with LazyTensorStorage(ndim=2) instead",
    "consume_after_n_samples": "Call empty() after the samples you need",
    "service_backend": "Buffers run in the calling process",
    "service_backend_options": "Buffers run in the calling process",
    "transport": "Buffers run in the calling process",
    "transport_options": "Buffers run in the calling process",
    "consolidated": "tdrl storages keep one tensor per leaf already",
    "shared_init": (
        "Storages are allocated by one process: build the buffer with shared=True and extend it "
        "once before starting the processes"
    ),
    "cleanup_memmap": "It only applies with shared_init=True",
    "track_generations": "Write generations are not tracked; compare write_count instead",
    "sampler_device": "Priorities live on the CPU",
    "sync": "Priorities are always updated synchronously",
}
