"""Training: the ``tdrl`` command line, presets, trainers, logging and checkpoints."""

from tdrl.train._checkpoint import (
    CheckpointWriteError,
    checkpoints,
    latest_checkpoint,
    load_checkpoint,
    load_latest,
    save_checkpoint,
)
from tdrl.train._checkpoint_verify import verify_checkpoint
from tdrl.train._config import PRESETS, apply_overrides, load_config, load_preset
from tdrl.train._eval import EpisodeTracker, evaluate, evaluate_returns
from tdrl.train._lock import RunLock, RunLockedError
from tdrl.train._on_policy import OnPolicyTrainer
from tdrl.train._stop import GracefulStop, StopTimeout
from tdrl.train._trainer import Trainer

__all__ = [
    "PRESETS",
    "CheckpointWriteError",
    "EpisodeTracker",
    "GracefulStop",
    "OnPolicyTrainer",
    "RunLock",
    "RunLockedError",
    "StopTimeout",
    "Trainer",
    "apply_overrides",
    "checkpoints",
    "evaluate",
    "evaluate_returns",
    "latest_checkpoint",
    "load_checkpoint",
    "load_config",
    "load_latest",
    "load_preset",
    "save_checkpoint",
    "verify_checkpoint",
]
