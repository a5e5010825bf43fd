"""Everything a training worker and the driver's controller tell each other.

All plain picklable dataclasses, so a fake worker group in a test and real actors
exchange exactly the same values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class WorkerState(enum.Enum):
    """RUNNING -> FINISHED | FAILED. FAILED covers both an exception and a dead process."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class WorkerMetadata:
    """Where a worker runs, asked once before ranks are assigned."""

    node_id: str
    node_ip: str
    hostname: str
    pid: int
    free_port: int
    gpu_ids: tuple[Any, ...] = ()


@dataclass(frozen=True)
class RankInfo:
    world_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int


@dataclass(frozen=True)
class WorkerReport:
    """One ``train.report`` call on one rank.

    ``index`` counts this rank's reports in this attempt; the checkpoint, if any, is
    already in storage under ``checkpoint_dir`` unless it travels as ``packed`` bytes
    (a worker on another node than a local storage_path).
    """

    rank: int
    index: int
    metrics: dict[str, Any]
    checkpoint_dir: str | None = None
    packed: bytes | None = None
    timestamp: float = 0.0


@dataclass(frozen=True)
class WorkerError:
    """Why a rank failed: its traceback, and the exception itself when it pickles."""

    rank: int
    traceback_str: str
    exception: BaseException | None = None
    died: bool = False
    node_ip: str = ""
    pid: int = 0

    def describe(self) -> str:
        """One headline (who, what, the error's last line), then the full traceback."""
        where = f" (pid={self.pid}, ip={self.node_ip})" if self.pid else ""
        what = "died" if self.died else "raised"
        who = f"worker rank {self.rank}" if self.rank >= 0 else "starting the worker group"
        lines = [line for line in self.traceback_str.strip().splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "no details"
        head = f"{who}{where} {what}: {last}"
        if len(lines) <= 1:
            return head
        return f"{head}\n{self.traceback_str.rstrip()}"


@dataclass(frozen=True)
class WorkerPoll:
    """What one rank has to say since its last poll."""

    rank: int
    state: WorkerState
    reports: list[WorkerReport] = field(default_factory=list)
    error: WorkerError | None = None
