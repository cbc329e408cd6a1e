"""The transforms of a replay buffer, and helpers for indexing and pinning its output."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["TransformChain", "first_element", "pin"]


class TransformChain:
    """The ordered transforms of a buffer (TorchRL's buffer ``Compose``).

    Sampled data goes through every transform in order. Written data (``extend``/``add``) goes
    through the inverse maps in reverse order: ``t.inv(data)`` for transforms that have an
    ``inv`` method (tdrl ``Transform`` objects; identity unless they have ``in_keys_inv``),
    nothing for plain callables. A transform appended with ``invert=True`` swaps the two: its
    forward call runs on written data and its ``inv`` (if any) on sampled data.

    Examples:
        >>> chain = TransformChain()
        >>> chain.insert(0, lambda x: x + 1, invert=False)
        >>> chain.insert(1, lambda x: x * 10, invert=False)
        >>> chain(torch.tensor(1)), len(chain)
        (tensor(20), 2)
    """

    def __init__(self) -> None:
        self._items: list[tuple[Callable[[Any], Any], bool]] = []

    def insert(self, index: int, transform: Callable[[Any], Any], *, invert: bool) -> None:
        """Inserts ``transform`` before position ``index`` (``len(self)`` appends)."""
        if not callable(transform):
            raise TypeError(
                f"ReplayBuffer.append_transform: the transform is not callable (got "
                f"{type(transform).__name__}; expected a Transform or a callable). Pass a "
                "Transform or a function of the sampled data."
            )
        if isinstance(transform, torch.nn.Module):
            transform.eval()  # as TorchRL: buffer transforms run in eval mode
        self._items.insert(index, (transform, bool(invert)))

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Callable[[Any], Any]]:
        return iter(t for t, _ in self._items)

    def __getitem__(self, index: int) -> Callable[[Any], Any]:
        return self._items[index][0]

    def __call__(self, data: Any) -> Any:
        """Applies the sample-side maps in order."""
        for transform, invert in self._items:
            if not invert:
                data = transform(data)
            elif callable(getattr(transform, "inv", None)):
                data = transform.inv(data)  # type: ignore[attr-defined]
        return data

    def inv(self, data: Any) -> Any:
        """Applies the write-side maps, last transform first."""
        for transform, invert in reversed(self._items):
            if invert:
                data = transform(data)
            elif callable(getattr(transform, "inv", None)):
                data = transform.inv(data)  # type: ignore[attr-defined]
        return data


def first_element(data: Any) -> Any:
    """Drops the leading dim of a one-element batch (TensorDict, tensor, list or pytree)."""
    if isinstance(data, (TensorDictBase, torch.Tensor)):
        return data[0]
    if isinstance(data, dict):
        return {k: first_element(v) for k, v in data.items()}
    if isinstance(data, tuple):
        return tuple(first_element(v) for v in data)
    if isinstance(data, list) and data and all(isinstance(v, torch.Tensor) for v in data):
        return [first_element(v) for v in data]
    return data[0]


def pin(data: Any) -> Any:
    """Returns ``data`` with its tensors in pinned (page-locked) host memory."""
    if isinstance(data, (TensorDictBase, torch.Tensor)):
        return data.pin_memory()
    if isinstance(data, dict):
        return {k: pin(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(pin(v) for v in data)
    return data
