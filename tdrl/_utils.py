"""TorchRL's ``torchrl._utils`` import path: ``from tdrl._utils import timeit, logger``.

The names are those of :mod:`tdrl.utils` (one implementation, re-exported here).

Examples:
    >>> from tdrl._utils import timeit
    >>> import tdrl.utils
    >>> timeit is tdrl.utils.timeit
    True
"""

from tdrl.utils import compile_with_warmup, get_available_device, logger, timeit

__all__ = ["compile_with_warmup", "get_available_device", "logger", "timeit"]
