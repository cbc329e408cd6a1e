"""tdrl: a fast, robust reinforcement-learning library for PyTorch built on tensordict.

The package root stays import-light on purpose: import what you need from the
subpackages (``tdrl.specs``, ``tdrl.envs``, ``tdrl.data``, ``tdrl.modules``,
``tdrl.objectives``, ``tdrl.collectors``, ``tdrl.train``).

The tools TorchRL scripts import from the package root (``from torchrl import timeit``) are
found here too, loaded from :mod:`tdrl.utils` on first access only.

Examples:
    >>> import tdrl
    >>> tdrl.timeit is __import__("tdrl.utils").utils.timeit
    True
"""

from typing import Any

__version__ = "0.1.0"

_UTILS = ("compile_with_warmup", "get_available_device", "logger", "timeit")

__all__ = ["__version__", *_UTILS]


def __getattr__(name: str) -> Any:
    # Lazy: importing tdrl must not import torch (PEP 562 module __getattr__).
    if name in _UTILS:
        import tdrl.utils

        return getattr(tdrl.utils, name)
    raise AttributeError(f"module 'tdrl' has no attribute {name!r}")
