"""Sampler interface, uniform sampling with and without replacement."""

from __future__ import annotations

import abc
from typing import Any

import torch

from tdrl.errors import CheckpointError

from ._storages import Storage

__all__ = ["RandomSampler", "Sampler", "SamplerWithoutReplacement"]


def check_not_empty(sampler: Sampler, storage: Storage) -> int:
    """Returns ``len(storage)``; raises a clear error when it is zero."""
    n = len(storage)
    if n == 0:
        raise RuntimeError(
            f"{type(sampler).__name__}.sample: the buffer is empty (got 0 elements; expected at "
            "least 1). Extend the buffer before sampling."
        )
    return n


class Sampler(abc.ABC):
    """Chooses which stored elements a batch holds.

    :meth:`sample` returns flat indices (``0 .. len(storage) - 1``) and an info dict of per-element
    tensors (for instance ``"priority_weight"``). All randomness comes from the ``generator``
    given (the global generator when ``None``), so a seeded generator reproduces the batches.
    :meth:`add` is called with the flat indices of every write.

    Examples:
        >>> from tdrl.data import LazyTensorStorage
        >>> storage = LazyTensorStorage(10)
        >>> storage.write_range(0, storage.prepare(torch.arange(5)))
        >>> index, info = RandomSampler().sample(storage, 3, torch.Generator().manual_seed(0))
        >>> index.shape, info
        (torch.Size([3]), {})
    """

    @abc.abstractmethod
    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Returns ``(index, info)`` for a batch of ``batch_size`` elements."""

    def add(self, storage: Storage, index: torch.Tensor) -> None:  # noqa: B027 - optional hook
        """Called after elements at flat ``index`` were (over)written."""

    def check_storage(self, storage: Storage) -> None:  # noqa: B027 - optional hook
        """Raises if the sampler cannot work with ``storage``."""

    @property
    def ran_out(self) -> bool:
        """Whether the last batch ended an epoch (iteration over the buffer stops then)."""
        return False

    def empty(self) -> None:  # noqa: B027 - optional hook
        """Resets the sampler together with an emptied storage."""

    #: int attributes a shared buffer keeps equal in every process (see ``shared=True``).
    shared_ints: tuple[str, ...] = ()

    def share_problem(self) -> str | None:
        """Why the sampler cannot be shared between processes (``None``: it can); see
        :meth:`~tdrl.data.Storage.share_problem`."""
        return None

    def share_memory_(self) -> None:  # noqa: B027 - optional hook
        """Moves tensor state into shared memory (a shared buffer calls it once the storage
        is allocated)."""

    def config(self) -> dict[str, Any]:
        """The construction arguments a checkpoint must match."""
        return {"class": type(self).__name__}

    def state_dict(self) -> dict[str, Any]:
        """The sampler state as tensors and JSON values."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 - stateless default
        """Restores :meth:`state_dict`; raises ``CheckpointError`` if it is invalid."""

    def check_fits(self, length: int, slots: int, where: str) -> None:  # noqa: B027
        """Raises ``CheckpointError`` unless the loaded state can serve a storage that holds
        ``length`` elements in ``slots`` slots (called on a loaded copy before a checkpoint is
        accepted)."""


class RandomSampler(Sampler):
    """Samples stored elements uniformly, with replacement.

    Examples:
        >>> from tdrl.data import LazyTensorStorage, RandomSampler, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler(), batch_size=4)
        >>> _ = rb.extend(torch.arange(3))
        >>> bool(rb.sample().lt(3).all())
        True
    """

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Draws ``batch_size`` indices uniformly in ``[0, len(storage))``."""
        n = check_not_empty(self, storage)
        if storage.ndim == 1:
            return torch.randint(n, (batch_size,), generator=generator), {}
        # As TorchRL: one draw per storage dim (time, then env), so that seeded runs match.
        shape = storage.shape  # type: ignore[attr-defined]
        coords = [torch.randint(size, (batch_size,), generator=generator) for size in shape]
        return storage.ravel_index(torch.stack(coords, -1)), {}  # type: ignore[attr-defined]


class SamplerWithoutReplacement(Sampler):
    """Visits every stored element once per epoch, in random (or storage) order.

    An epoch is a permutation of the elements stored when it starts; elements written during an
    epoch join the next one. The last batch of an epoch is smaller unless ``drop_last``, which
    skips the leftover elements. Iterating over a buffer stops at the end of an epoch.

    Args:
        drop_last: drop the last incomplete batch of each epoch.
        shuffle: a random permutation per epoch (``False``: storage order).

    Examples:
        >>> from tdrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(shuffle=False), batch_size=4)
        >>> _ = rb.extend(torch.arange(6))
        >>> [batch.tolist() for batch in rb]
        [[0, 1, 2, 3], [4, 5]]
    """

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        self.drop_last = drop_last
        self.shuffle = shuffle
        self._perm = torch.empty(0, dtype=torch.long)
        self._pos = 0
        self._ran_out = False

    @property
    def ran_out(self) -> bool:
        return self._ran_out

    def _epoch_done(self, batch_size: int) -> bool:
        left = self._perm.numel() - self._pos
        return left <= 0 or (self.drop_last and left < batch_size)

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Returns the next ``batch_size`` indices of the current epoch (starting one if needed)."""
        n = check_not_empty(self, storage)
        if self.drop_last and batch_size > n:
            raise ValueError(
                f"SamplerWithoutReplacement.sample: not enough elements for one batch with "
                f"drop_last=True (got {n}; expected at least batch_size={batch_size}). Extend the "
                "buffer or sample smaller batches."
            )
        if self._epoch_done(batch_size):
            self._perm = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
            self._pos = 0
        index = self._perm[self._pos : self._pos + batch_size]
        self._pos += index.numel()
        self._ran_out = self._epoch_done(batch_size)
        return index, {}

    def empty(self) -> None:
        self._perm = torch.empty(0, dtype=torch.long)
        self._pos, self._ran_out = 0, False

    def config(self) -> dict[str, Any]:
        return {"class": type(self).__name__, "drop_last": self.drop_last, "shuffle": self.shuffle}

    def state_dict(self) -> dict[str, Any]:
        """The epoch permutation and the position in it."""
        return {"perm": self._perm, "pos": self._pos, "ran_out": self._ran_out}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        perm, pos = state.get("perm"), state.get("pos")
        valid = (
            isinstance(perm, torch.Tensor)
            and perm.dtype == torch.long
            and perm.dim() == 1
            and isinstance(pos, int)
            and 0 <= pos <= perm.numel()
        )
        if not valid:
            raise CheckpointError(
                "SamplerWithoutReplacement.load_state_dict: invalid epoch state (got perm="
                f"{type(perm).__name__}, pos={pos!r}; expected a 1-D int64 tensor and 0 <= pos <= "
                "its length). The checkpoint is corrupted; dump again."
            )
        assert isinstance(perm, torch.Tensor) and isinstance(pos, int)
        if not torch.equal(torch.sort(perm).values, torch.arange(perm.numel())):
            # Zeros, repeats or gaps would visit some elements twice and others never.
            raise CheckpointError(
                "SamplerWithoutReplacement.load_state_dict: the epoch order is not a "
                f"permutation (got {perm.numel()} indices, {perm.unique().numel()} distinct, in "
                f"[{int(perm.min())}, {int(perm.max())}]; expected each of 0..{perm.numel() - 1} "
                "once). The checkpoint is corrupted; dump again."
            )
        self._perm, self._pos = perm.clone(), pos
        self._ran_out = bool(state.get("ran_out", False))

    def check_fits(self, length: int, slots: int, where: str) -> None:
        # An epoch permutes the elements stored when it began, never more than are stored now.
        if self._perm.numel() > length:
            raise CheckpointError(
                f"{where}: the sampler's epoch permutation points outside the storage (got "
                f"indices in [0, {self._perm.numel() - 1}]; expected indices in [0, {length})). "
                "The checkpoint is corrupted; dump again."
            )
