"""The seed chain: the seed that follows another, as TorchRL's envs compute it."""

from __future__ import annotations

import numpy as np

__all__ = ["next_seed"]

_MAX_SEED = 2**32 - 1


def next_seed(seed: int) -> int:
    """The seed that follows ``seed`` in a seeding chain (deterministic, in ``[0, 2**32 - 1)``).

    Eight bytes drawn from numpy's default generator seeded with ``seed``, read as a big-endian
    integer, modulo ``2**32 - 1``: the formula TorchRL uses, so that a chain started from the
    same seed gives the same per-worker seeds in both libraries. Consecutive links are
    unrelated numbers, so the seeds of neighbouring workers never overlap the ``seed + i``
    ranges that vector envs use for their sub-envs.

    Examples:
        >>> a = next_seed(0)
        >>> a == next_seed(0), a != next_seed(1), 0 <= a < 2**32 - 1
        (True, True, True)
    """
    drawn = np.random.default_rng(seed).bytes(8)
    return int.from_bytes(drawn, "big") % _MAX_SEED
