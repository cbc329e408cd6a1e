"""Experiment loggers with TorchRL's interface: CSV files, TensorBoard, Weights & Biases, MLflow.

Every logger implements :class:`Logger` (``log_scalar``, ``log_metrics``, ``log_video``,
``log_hparams``, ``log_histogram``, ``log_str``); :func:`get_logger` builds one from a type name
as TorchRL's scripts do. TensorBoard, W&B and MLflow are imported only when their logger is
created (``pip install 'tdrl[record]'`` installs them).

Examples:
    >>> import tempfile
    >>> from tdrl.record.loggers import generate_exp_name, get_logger
    >>> with tempfile.TemporaryDirectory() as d:
    ...     logger = get_logger("csv", logger_name=d, experiment_name=generate_exp_name("PPO", "x"))
    ...     logger.log_metrics({"train/reward": 1.0}, step=100)
    {'train/reward': 1.0}
"""

from tdrl.record.loggers.common import Logger
from tdrl.record.loggers.csv import CSVLogger
from tdrl.record.loggers.mlflow import MLFlowLogger
from tdrl.record.loggers.tensorboard import TensorboardLogger
from tdrl.record.loggers.utils import generate_exp_name, get_logger
from tdrl.record.loggers.wandb import WandbLogger

__all__ = [
    "CSVLogger",
    "Logger",
    "MLFlowLogger",
    "TensorboardLogger",
    "WandbLogger",
    "generate_exp_name",
    "get_logger",
]
