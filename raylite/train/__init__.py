"""raylite.train: distributed training with Ray Train's API.

``from raylite.train import ScalingConfig, RunConfig`` / ``from raylite.train.torch
import TorchTrainer`` work as their ``ray.train`` counterparts. The framework
integrations (``torch``, ``lightning``, ``huggingface``) load on first use, so
``import raylite.train`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from raylite.train._internal.callbacks import TrainRunContext, UserCallback
from raylite.train._internal.reported import (
    CheckpointConsistencyMode,
    ReportedCheckpoint,
    ReportedCheckpointStatus,
)
from raylite.train._internal.session import (
    TrainContext,
    get_all_reported_checkpoints,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    report,
)
from raylite.train.checkpoint import Checkpoint
from raylite.train.config import (
    BackendConfig,
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    SyncConfig,
)
from raylite.train.data_parallel_trainer import DataParallelTrainer
from raylite.train.error import ControllerError, TrainingFailedError, WorkerGroupError
from raylite.train.result import Result

_SUBMODULES = ("torch", "lightning", "huggingface", "xgboost", "lightgbm", "tensorflow")

__all__ = [
    "BackendConfig",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "ControllerError",
    "DataConfig",
    "DataParallelTrainer",
    "FailureConfig",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "TrainContext",
    "TrainRunContext",
    "TrainingFailedError",
    "UserCallback",
    "WorkerGroupError",
    "get_all_reported_checkpoints",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
]


def __getattr__(name: str) -> Any:
    # `from raylite import train; train.torch.prepare_model(...)` (the user's documents
    # write it this way) needs the submodule without an explicit import.
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
