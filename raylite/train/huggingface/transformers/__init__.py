"""raylite.train.huggingface.transformers: ``transformers.Trainer`` inside TorchTrainer workers."""

from raylite.train.huggingface.transformers._transformers_utils import (
    RayTrainReportCallback,
    prepare_trainer,
)

__all__ = ["RayTrainReportCallback", "prepare_trainer"]
