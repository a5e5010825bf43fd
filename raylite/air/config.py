"""`ray.air.config`: the run configs, under their older import path."""

from raylite.train import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)

DatasetConfig = DataConfig

__all__ = ["CheckpointConfig", "DataConfig", "DatasetConfig", "FailureConfig", "RunConfig",
           "ScalingConfig"]
