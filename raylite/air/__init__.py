"""raylite.air: Ray's `ray.air` namespace, which older integrations still import
(`ray.air.session`, `ray.air.config`, `ray.air.RunConfig`, ...). Every name is Train's or
Tune's own object, so `ray.air.RunConfig is ray.train.RunConfig`."""

from __future__ import annotations

import importlib
from typing import Any

from raylite.train import (
    Checkpoint,
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    Result,
    RunConfig,
    ScalingConfig,
)

_SUBMODULES = ("session", "config", "result", "integrations", "constants")

__all__ = ["Checkpoint", "CheckpointConfig", "DataConfig", "FailureConfig", "Result",
           "RunConfig", "ScalingConfig", "session"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
