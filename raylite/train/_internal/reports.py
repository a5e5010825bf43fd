"""Merge per-rank ``report`` calls into the run's reports (pure).

``report`` is not a barrier in raylite: a loop that reports from rank 0 only (the
user's documents guard it with ``if world_rank == 0``) must not hang the other ranks.
So each rank numbers its own reports, and report number k of the run is emitted when
rank 0 makes its k-th report, carrying rank 0's metrics; once rank 0 has finished,
the lowest rank that reports number k speaks for it. Every rank's checkpoint files for
number k land in the same folder; a checkpoint whose rank reports after number k was
emitted is attached late.

Example, 2 ranks: rank 1 reports #0 with a checkpoint (held), rank 0 reports #0
metric-only -> emit #0 with rank 0's metrics and the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raylite.train._internal.messages import WorkerReport


@dataclass(frozen=True)
class RunReport:
    """Report k of the current attempt, as the driver records it."""

    index: int
    rank: int
    metrics: dict[str, Any]
    checkpoint_dir: str | None
    rank_metrics: dict[int, dict[str, Any]] = field(default_factory=dict, compare=False)  # every rank's, as held


@dataclass(frozen=True)
class LateCheckpoint:
    """A checkpoint for an already emitted report (its rank was slower than rank 0)."""

    index: int
    checkpoint_dir: str


Emission = RunReport | LateCheckpoint


class ReportAggregator:
    """Turns WorkerReports of one attempt into RunReports, in order."""

    def __init__(self, world_size: int) -> None:
        self._world_size = world_size
        self._pending: dict[int, dict[int, WorkerReport]] = {}
        self._emitted: dict[int, RunReport] = {}
        self._next = 0
        self._finished: set[int] = set()

    def add(self, report: WorkerReport) -> list[Emission]:
        if report.index in self._emitted:
            done = self._emitted[report.index]
            if report.checkpoint_dir and not done.checkpoint_dir:
                self._emitted[report.index] = RunReport(
                    done.index, done.rank, done.metrics, report.checkpoint_dir, done.rank_metrics
                )
                return [LateCheckpoint(report.index, report.checkpoint_dir)]
            return []
        self._pending.setdefault(report.index, {})[report.rank] = report
        return self._drain()

    def finished(self, rank: int) -> list[Emission]:
        """Rank ``rank`` returned from its loop: it will report no more."""
        self._finished.add(rank)
        return self._drain()

    def flush(self) -> list[Emission]:
        """Emit everything still held (the attempt ended)."""
        self._finished.update(range(self._world_size))
        return self._drain()

    def _speaker(self) -> int | None:
        """The lowest rank still reporting; None when every rank is done."""
        for rank in range(self._world_size):
            if rank not in self._finished:
                return rank
        return None

    def _drain(self) -> list[Emission]:
        out: list[Emission] = []
        while self._next in self._pending:
            held = self._pending[self._next]
            speaker = self._speaker()
            if 0 in held:
                chosen = held[0]
            elif 0 in self._finished:
                # Rank 0 is done; the lowest rank that has reported speaks, once every
                # lower still-running rank either reported too or is the speaker itself.
                if speaker is not None and speaker not in held:
                    break
                chosen = held[min(held)]
            else:
                break
            ckpt = chosen.checkpoint_dir or next(
                (r.checkpoint_dir for _, r in sorted(held.items()) if r.checkpoint_dir), None
            )
            by_rank = {rank: r.metrics for rank, r in held.items()}
            emitted = RunReport(self._next, chosen.rank, chosen.metrics, ckpt, by_rank)
            self._emitted[self._next] = emitted
            del self._pending[self._next]
            self._next += 1
            out.append(emitted)
        return out
