"""Offline datasets as read-only replay buffers (TorchRL's ``torchrl.data.datasets``).

:class:`MinariExperienceReplay` reads Minari datasets (the format D4RL's datasets moved to,
and what ``tdrl dataset collect`` writes); :class:`D4RLExperienceReplay` reads D4RL HDF5 files.
Both convert their source once into memory-mapped files and use TorchRL's step layout, so the
losses and samplers read them as collector data. Reading Minari needs ``pip install
'tdrl[offline]'``.
"""

from ._check import check_dataset_matches_env
from ._common import BaseDatasetExperienceReplay
from ._d4rl import D4RLExperienceReplay
from ._minari import MinariExperienceReplay
from ._minari_write import minari_dataset_path, write_minari_dataset
from ._registry import load_dataset, register_dataset
from ._writer import ImmutableDatasetWriter

__all__ = [
    "BaseDatasetExperienceReplay",
    "D4RLExperienceReplay",
    "ImmutableDatasetWriter",
    "MinariExperienceReplay",
    "check_dataset_matches_env",
    "load_dataset",
    "minari_dataset_path",
    "register_dataset",
    "write_minari_dataset",
]
