"""The writer of read-only datasets: any write raises."""

from __future__ import annotations

from typing import Any

import torch

from tdrl.data.replay import Writer
from tdrl.data.replay._storages import Batch, Storage

__all__ = ["ImmutableDatasetWriter"]


class ImmutableDatasetWriter(Writer):
    """The default writer of the offline datasets (TorchRL's name): writing raises.

    A converted dataset is shared by every buffer that opens it; a write would change it for
    all of them (or, through a private mapping, for one buffer only, silently). Pass another
    writer to the dataset to make it writable in memory.

    Examples:
        >>> from tdrl.data import ReplayBuffer, LazyTensorStorage
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=ImmutableDatasetWriter())
        >>> try:
        ...     rb.extend(torch.zeros(2))
        ... except RuntimeError as err:
        ...     print(str(err)[:44])
        ImmutableDatasetWriter.write: this dataset i
    """

    def write(self, storage: Storage, batch: Batch) -> torch.Tensor:
        raise RuntimeError(
            "ImmutableDatasetWriter.write: this dataset is read-only (got a write of "
            f"{batch.length} elements; expected none). Copy the data into a buffer of your own "
            "(ReplayBuffer(storage=LazyTensorStorage(n)).extend(dataset[:]))."
        )

    def state_dict(self) -> dict[str, Any]:
        """Nothing to save: the writer has no state."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore."""
