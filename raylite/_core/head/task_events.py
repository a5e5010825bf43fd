"""Task events: what each task attempt went through, kept by the head in bounded memory.

Recording is split so that neither side adds a message to the task's own path:
- `TaskEventBuffer` (`_core/task_event_buffer.py`, in every driver and worker): `record()` appends one tuple to a
  bounded deque (a full buffer drops its oldest and counts them); a background loop
  takes the batch with `drain()` about once a second and sends one TaskEvents message.
  The owner records PENDING_ARGS_AVAIL / PENDING_NODE_ASSIGNMENT at submit and the final
  FINISHED / FAILED when the reply arrives; the executing worker records RUNNING and its
  own FINISHED / FAILED with node, worker and pid.
- Nothing is lost when a short-lived driver exits: the driver flushes at shutdown; a node
  stopping the workers of an exited owner first has them flush (FlushTaskEvents); and the
  head closes rows of an ended job still open after a grace period as FAILED (`close_job`).
- `TaskEventTable` (in the head, pure): merges events by (task id, attempt) into one row
  per attempt, at most `max_per_job` rows per job (the oldest row is dropped first and
  counted per job).

Task lifecycle as recorded (Ray's names):
    PENDING_ARGS_AVAIL -> PENDING_NODE_ASSIGNMENT -> RUNNING -> (FINISHED | FAILED)
A retried task starts a new attempt (attempt_number + 1) with its own row.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from raylite._core.task_event_buffer import ORDER as _ORDER
from raylite._core.task_event_buffer import TERMINAL

_RUNNING_RANK = _ORDER["RUNNING"]
_TERMINAL_RANK = _ORDER["FINISHED"]


class _Row:
    """One task attempt's merged events. Slots, not a dict: the head keeps up to
    task_events_max_per_job of these per job, and a dict per row cost ~1.3 KB (13 MiB of the
    head's memory at the default cap); `TaskEventTable.rows()` builds the dicts on read."""

    __slots__ = ("task_id", "attempt", "job_id", "state", "events", "creation_time_s",
                 "start_time_s", "end_time_s", "descs", "closed_by_head")

    def __init__(self, task_id: bytes, attempt: int, job_id: bytes, state: str) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.job_id = job_id
        self.state = state
        self.events: list[Any] = []  # flat: state, time_s, state, time_s, ...
        self.creation_time_s: float | None = None
        self.start_time_s: float | None = None
        self.end_time_s: float | None = None
        # descriptions kept by reference (shared by the rows of a batch), merged when read
        self.descs: list[dict[str, Any]] | None = None
        self.closed_by_head: tuple[float, dict[str, Any]] | None = None  # see close_job

    def add_descs(self, descs: Any) -> None:
        if self.descs is None:
            self.descs = []
        self.descs.extend(descs)


class TaskEventTable:
    """The head's merged view: one row per (task id, attempt), bounded per job."""

    def __init__(self, max_per_job: int = 10000) -> None:
        self.max_per_job = max(1, max_per_job)
        self._jobs: dict[bytes, OrderedDict[tuple[bytes, int], _Row]] = {}
        self.dropped: dict[bytes, int] = {}

    def add(self, events: list[list[Any]], descs: list[dict[str, Any]] | None = None, dropped_at_source: int = 0,
            source_job: bytes = b"") -> None:
        descs = descs or []
        ndescs = len(descs)
        jobs = self._jobs
        cap = self.max_per_job
        last_job: bytes | None = None
        rows: OrderedDict[tuple[bytes, int], _Row] = OrderedDict()
        for event in events:
            if len(event) > 7:
                task_id, attempt, job_id, state, time_s, idx, start_s, earlier = event
            else:
                task_id, attempt, job_id, state, time_s, idx, start_s = event
                earlier = ()
            if job_id != last_job:  # a batch is mostly one job's: look its table up once
                found = jobs.get(job_id)
                if found is None:
                    found = jobs[job_id] = OrderedDict()
                rows, last_job = found, job_id
            key = (task_id, attempt)
            row = rows.get(key)
            if row is None:
                if len(rows) >= cap:
                    rows.popitem(last=False)  # O(1); a plain dict's front deletions degrade
                    self.dropped[job_id] = self.dropped.get(job_id, 0) + 1
                row = rows[key] = _Row(task_id, attempt, job_id, state)
            # earlier events of this attempt, sent with this one (TaskEventBuffer.drain)
            for i in range(0, len(earlier) - 1, 2):
                _merge(row, earlier[i], earlier[i + 1])
            if start_s:
                _merge(row, "RUNNING", start_s)
            _merge(row, state, time_s)
            if idx:
                if row.descs is None:
                    row.descs = []
                for i in idx:
                    if 0 <= i < ndescs:
                        row.descs.append(descs[i])
        if dropped_at_source:
            self.dropped[source_job] = self.dropped.get(source_job, 0) + dropped_at_source

    def close_job(self, job_id: bytes, time_s: float, reason: str) -> int:
        """The job's driver exited a grace period ago: rows still open can no longer end on
        their own (their owner is gone and its workers were stopped), so they end FAILED with
        `reason`. A real end reported later still wins (see _merge). Returns how many."""
        closed = 0
        for row in self._jobs.get(job_id, {}).values():
            if row.state not in TERMINAL:
                _merge(row, "FAILED", time_s)
                desc = {"error_type": "WORKER_DIED", "error_message": reason}
                row.add_descs((desc,))
                row.closed_by_head = (time_s, desc)
                closed += 1
        return closed

    def state_counts(self) -> dict[str, int]:
        """Task attempts by state, read in place (rows() copies every row and its events: too
        much to do every few seconds, for the metrics, on a big table)."""
        counts: dict[str, int] = {}
        for rows in self._jobs.values():
            for row in rows.values():
                counts[row.state] = counts.get(row.state, 0) + 1
        return counts

    def rows(self, job_id: bytes = b"", limit: int = 0) -> list[dict[str, Any]]:
        """Rows (newest last), of one job or all; `limit` keeps the newest."""
        tables = [self._jobs.get(job_id, OrderedDict())] if job_id else list(self._jobs.values())
        # events arrive from owner and worker in any order: show them in time order
        out = [_materialize(r) for table in tables for r in table.values()]
        if limit and len(out) > limit:
            out.sort(key=lambda r: r.get("creation_time_s") or 0.0)
            out = out[-limit:]
        return out

    def __len__(self) -> int:
        return sum(len(t) for t in self._jobs.values())


def _materialize(row: _Row) -> dict[str, Any]:
    out: dict[str, Any] = {"task_id": row.task_id, "attempt_number": row.attempt, "job_id": row.job_id,
                           "state": row.state}
    for name in ("creation_time_s", "start_time_s", "end_time_s"):
        value = getattr(row, name)
        if value is not None:
            out[name] = value
    for desc in row.descs or ():
        for k, v in desc.items():
            if v not in (None, "", b"") or k not in out:
                out[k] = v
    flat = row.events
    pairs = sorted(zip(flat[0::2], flat[1::2]), key=_event_order)
    out["events"] = [{"state": st, "created_ms": int(t * 1000)} for st, t in pairs]
    return out


def _event_order(event: tuple[str, float]) -> tuple[float, int]:
    return event[1], _ORDER.get(event[0], 0)


def _merge(row: _Row, state: str, time_s: float) -> None:
    row.events += (state, time_s)
    rank = _ORDER.get(state, 0)
    terminal = rank == _TERMINAL_RANK
    if terminal and row.closed_by_head is not None:
        # the head closed the row when its job ended; this end was really reported: it wins
        closed_at, desc = row.closed_by_head
        row.closed_by_head = None
        flat = row.events
        kept = [(s, t) for s, t in zip(flat[0::2], flat[1::2]) if (s, t) != ("FAILED", closed_at)]
        row.events = [x for pair in kept for x in pair]
        row.descs = [d for d in row.descs or () if d is not desc]
        row.state, row.end_time_s = state, time_s
        return
    # events come from two processes, in any order: the furthest state wins (FAILED over FINISHED)
    current = row.state
    if (current not in TERMINAL and rank >= _ORDER.get(current, 0)) or (state == "FAILED" and current == "FINISHED"):
        row.state = state
    if rank < _RUNNING_RANK:
        if row.creation_time_s is None:
            row.creation_time_s = time_s
    elif rank == _RUNNING_RANK:
        row.start_time_s = time_s
    elif row.end_time_s is None or time_s < row.end_time_s:
        row.end_time_s = time_s  # the worker's end comes before the owner hears of it: keep the first
