"""`ray.train.get_all_reported_checkpoints()`: the checkpoints this run has reported so far,
seen from inside a training worker, with the metrics each was reported with.

A worker knows the checkpoints its own rank reported (every rank's files of one report merge
into one directory, so they are the run's checkpoints too). Those that the run no longer keeps
(`CheckpointConfig(num_to_keep=...)` deleted them) are left out. raylite validates nothing, so
every checkpoint is COMMITTED, whatever consistency mode is asked for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from raylite.train.checkpoint import Checkpoint


class ReportedCheckpointStatus(str, enum.Enum):
    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


class CheckpointConsistencyMode(str, enum.Enum):
    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


@dataclass
class ReportedCheckpoint:
    """A reported checkpoint and the metrics reported with it."""

    checkpoint: Checkpoint
    metrics: dict[str, Any] = field(default_factory=dict)
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED


__all__ = ["CheckpointConsistencyMode", "ReportedCheckpoint", "ReportedCheckpointStatus"]
