"""assert_same_data: two TensorDicts hold exactly the same data (fast path against general path)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["assert_same_data"]


def assert_same_data(got: TensorDictBase, expected: TensorDictBase) -> None:
    """Asserts that ``got`` holds exactly the data of ``expected``: the batch size, the set of
    leaf keys, and every leaf's shape, dtype and values (bit for bit; NaNs equal).

    Raises:
        AssertionError: naming the first key that differs and what differs.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> a = TensorDict({"x": torch.ones(2), ("n", "y"): torch.zeros(2, 1)}, [2])
        >>> assert_same_data(a, a.clone())
        >>> b = a.clone()
        >>> b["x"][1] = 2.0
        >>> try:
        ...     assert_same_data(a, b)
        ... except AssertionError as err:
        ...     print(str(err).splitlines()[0])
        entry 'x' differs (got the first TensorDict's leaf; expected the second's):
    """
    if got.batch_size != expected.batch_size:
        raise AssertionError(
            f"batch sizes differ (got {tuple(got.batch_size)}; expected "
            f"{tuple(expected.batch_size)})"
        )
    keys, want = set(got.keys(True, True)), set(expected.keys(True, True))
    if keys != want:
        raise AssertionError(
            f"leaf keys differ (got extra {sorted(map(str, keys - want))} and missing "
            f"{sorted(map(str, want - keys))}; expected the same keys)"
        )
    for key in sorted(keys, key=str):
        x, y = got.get(key), expected.get(key)
        try:
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
        except AssertionError as err:
            raise AssertionError(
                f"entry {key!r} differs (got the first TensorDict's leaf; expected the "
                f"second's):\n{err}"
            ) from None
