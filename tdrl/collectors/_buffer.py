"""RolloutBuffer: the ``[*B, T]`` batch memory a collector writes into, step by step."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["RolloutBuffer"]


class RolloutBuffer:
    """Preallocated ``[*B, T]`` storage shaped like one step of data, written in place.

    The leaf list is cached at construction, so ``write`` is one ``copy_`` per leaf.

    Args:
        example: one step of data (batch ``[*B]``) whose keys, shapes and dtypes are kept.
        steps: the time length ``T``.
        device: where the storage lives (the example's device when None).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> buf = RolloutBuffer(TensorDict({"x": torch.zeros(2)}, [2]), steps=3)
        >>> buf.write(TensorDict({"x": torch.ones(2)}, [2]), 1)
        >>> buf.data["x"].tolist()
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    """

    def __init__(
        self, example: TensorDictBase, steps: int, device: torch.device | None = None
    ) -> None:
        nb = example.ndim
        data = example.unsqueeze(nb).expand(*example.batch_size, steps)
        data = data.to(device) if device is not None else data
        self.data = data.clone().zero_()
        self._dim = nb
        self._pairs = [(key, self.data.get(key)) for key in self.data.keys(True, True)]

    def write(self, td: TensorDictBase, t: int) -> None:
        """Copies one step into time index ``t``.

        Raises:
            KeyError: ``td`` lacks an entry the buffer holds (the data layout changed).
        """
        dim = self._dim
        for key, buf in self._pairs:
            value = td.get(key, None)
            if value is None:
                raise KeyError(
                    f"RolloutBuffer.write: entry {key!r} is missing at step {t} (available keys: "
                    f"{sorted(map(str, td.keys(True, True)))}). The policy or env changed the keys "
                    "it writes between steps; write the same keys at every step."
                )
            buf.select(dim, t).copy_(value)
