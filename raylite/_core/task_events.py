"""Task events: what each task attempt went through, kept by the head in bounded memory.

Recording is split so that neither side adds a message to the task's own path:
- `TaskEventBuffer` (in every driver and worker): `record()` appends one tuple to a
  bounded deque (a full buffer drops its oldest and counts them); a background loop
  takes the batch with `drain()` about once a second and sends one TaskEvents message.
  The owner records PENDING_ARGS_AVAIL / PENDING_NODE_ASSIGNMENT at submit and the final
  FINISHED / FAILED when the reply arrives; the executing worker records RUNNING and its
  own FINISHED / FAILED with node, worker and pid.
- `TaskEventTable` (in the head, pure): merges events by (task id, attempt) into one row
  per attempt, at most `max_per_job` rows per job (the oldest row is dropped first and
  counted per job).

Task lifecycle as recorded (Ray's names):
    PENDING_ARGS_AVAIL -> PENDING_NODE_ASSIGNMENT -> RUNNING -> (FINISHED | FAILED)
A retried task starts a new attempt (attempt_number + 1) with its own row.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from raylite._core import resources as R
from raylite._core.task_spec import KIND_ACTOR_CALL, KIND_ACTOR_CREATE, TaskSpec

TERMINAL = ("FINISHED", "FAILED")
_ORDER = {"PENDING_ARGS_AVAIL": 0, "PENDING_NODE_ASSIGNMENT": 1, "SUBMITTED_TO_WORKER": 2, "RUNNING": 3,
          "FINISHED": 4, "FAILED": 4}


class TaskEventBuffer:
    """A process's bounded buffer of task events waiting to be flushed to the head."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._events: deque = deque()
        self._capacity = capacity
        self._dropped = 0
        self._lock = threading.Lock()

    def record(self, task_id: bytes, attempt: int, job_id: bytes, state: str, time_s: float,
               extra: dict | None = None) -> None:
        events = self._events
        if len(events) >= self._capacity:
            with self._lock:
                if len(events) >= self._capacity:
                    events.popleft()
                    self._dropped += 1
        events.append((task_id, attempt, job_id, state, time_s, extra))

    def drain(self, describe: Callable[[Any], dict] | None = None) -> tuple[list, int]:
        """Take everything buffered: ([event lists], dropped count since the last drain).

        An event's `extra` may be recorded as anything cheap to keep (a TaskSpec); `describe`
        turns it into a dict here, off the task's path."""
        events = self._events
        out = []
        with self._lock:
            for _ in range(len(events)):
                task_id, attempt, job_id, state, time_s, extra = events.popleft()
                if extra is not None and describe is not None and not isinstance(extra, dict):
                    extra = describe(extra)
                out.append([task_id, attempt, job_id, state, time_s, extra or {}])
            dropped, self._dropped = self._dropped, 0
        return out, dropped

    def __len__(self) -> int:
        return len(self._events)


class TaskEventTable:
    """The head's merged view: one row per (task id, attempt), bounded per job."""

    def __init__(self, max_per_job: int = 10000) -> None:
        self.max_per_job = max(1, max_per_job)
        self._jobs: dict[bytes, OrderedDict[tuple[bytes, int], dict[str, Any]]] = {}
        self.dropped: dict[bytes, int] = {}

    def add(self, events: list, dropped_at_source: int = 0, source_job: bytes = b"") -> None:
        for task_id, attempt, job_id, state, time_s, extra in events:
            rows = self._jobs.get(job_id)
            if rows is None:
                rows = self._jobs[job_id] = OrderedDict()
            key = (task_id, attempt)
            row = rows.get(key)
            if row is None:
                if len(rows) >= self.max_per_job:
                    rows.popitem(last=False)
                    self.dropped[job_id] = self.dropped.get(job_id, 0) + 1
                row = rows[key] = {"task_id": task_id, "attempt_number": attempt, "job_id": job_id,
                                   "state": state, "events": []}
            _merge(row, state, time_s, extra)
        if dropped_at_source:
            self.dropped[source_job] = self.dropped.get(source_job, 0) + dropped_at_source

    def rows(self, job_id: bytes = b"", limit: int = 0) -> list[dict[str, Any]]:
        """Rows (newest last), of one job or all; `limit` keeps the newest."""
        tables = [self._jobs.get(job_id, OrderedDict())] if job_id else list(self._jobs.values())
        out = [dict(r, events=list(r["events"])) for t in tables for r in t.values()]
        if limit and len(out) > limit:
            out.sort(key=lambda r: r.get("creation_time_s") or 0.0)
            out = out[-limit:]
        return out

    def __len__(self) -> int:
        return sum(len(t) for t in self._jobs.values())


def _merge(row: dict[str, Any], state: str, time_s: float, extra: dict | None) -> None:
    row["events"].append({"state": state, "created_ms": int(time_s * 1000)})
    current = row["state"]
    # events come from two processes, in any order: the furthest state wins
    if current not in TERMINAL and _ORDER.get(state, 0) >= _ORDER.get(current, 0):
        row["state"] = state
    elif state == "FAILED" and current == "FINISHED":
        row["state"] = state
    if state in ("PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT"):
        row.setdefault("creation_time_s", time_s)
    elif state == "RUNNING":
        row["start_time_s"] = time_s
    elif state in TERMINAL:
        row["end_time_s"] = max(time_s, row.get("end_time_s") or 0.0)
    if extra:
        for k, v in extra.items():
            if v not in (None, "", b"") or k not in row:
                row[k] = v


_TYPES = {KIND_ACTOR_CALL: "ACTOR_TASK", KIND_ACTOR_CREATE: "ACTOR_CREATION_TASK"}


def describe_task(extra: Any) -> dict[str, Any]:
    """What a task's spec tells the state API (Ray's TaskState field names)."""
    if isinstance(extra, tuple):  # (spec, facts of the process that ran it)
        spec, facts = extra
        return {**describe_task(spec), **facts}
    if not isinstance(extra, TaskSpec):
        return {}
    spec = extra
    func = spec.function.qualname
    if spec.kind == KIND_ACTOR_CALL:
        func = f"{func}.{spec.method_name}"
    elif spec.kind == KIND_ACTOR_CREATE:
        func = f"{func}.__init__"
    return {"name": spec.display_name(), "func_or_class_name": func,
            "type": _TYPES.get(spec.kind, "NORMAL_TASK"), "actor_id": spec.actor_id,
            "parent_task_id": spec.parent_task_id, "required_resources": R.from_fixed(spec.resources),
            "language": "PYTHON"}
