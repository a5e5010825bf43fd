"""Task events, the recording side: the bounded buffer every driver and worker appends to
on the task path, and what a task's spec tells the state API. The head's merged table of these
events is `head/task_events.py`; both sides share the vocabulary here (a process role never
imports another's module).

`TaskEventBuffer.record()` appends one tuple to a bounded deque (a full buffer drops its oldest
and counts them); a background loop takes the batch with `drain()` about once a second and sends
one TaskEvents message. The owner records PENDING_ARGS_AVAIL / PENDING_NODE_ASSIGNMENT at submit
and the final FINISHED / FAILED when the reply arrives; the executing worker records RUNNING and
its own FINISHED / FAILED with node, worker and pid.

Task lifecycle as recorded (Ray's names):
    PENDING_ARGS_AVAIL -> PENDING_NODE_ASSIGNMENT -> RUNNING -> (FINISHED | FAILED)
A retried task starts a new attempt (attempt_number + 1) with its own row.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from raylite._core import resources as R
from raylite._core.task_spec import KIND_ACTOR_CALL, KIND_ACTOR_CREATE, TaskSpec

TERMINAL = ("FINISHED", "FAILED")
ORDER = {"PENDING_ARGS_AVAIL": 0, "PENDING_NODE_ASSIGNMENT": 1, "SUBMITTED_TO_WORKER": 2,
         "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY": 3, "RUNNING": 4, "FINISHED": 5, "FAILED": 5}


class TaskEventBuffer:
    """A process's bounded buffer of task events waiting to be flushed to the head."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._events: deque[tuple[bytes, int, bytes, str, float, Any]] = deque()
        self._capacity = capacity
        self._dropped = 0
        self._lock = threading.Lock()
        # called (in the recording thread) when an event lands in an empty buffer: the owner
        # flushes only while there is something to flush, so idle processes never wake up;
        # and when `batch` events are waiting: a burst is sent in batches of that size, so
        # neither side holds (or fragments its memory with) one huge message per interval
        self.on_first: Callable[[], None] | None = None
        self.on_batch: Callable[[], None] | None = None
        self.batch = 1000  # ~500 short tasks: a worker holds at most that many specs for events

    def record(self, task_id: bytes, attempt: int, job_id: bytes, state: str, time_s: float,
               extra: Any = None) -> None:
        """`extra`: None, a dict (merged into the task's row), a TaskSpec (described at drain
        time), or (spec, dict)."""
        events = self._events
        if len(events) >= self._capacity:
            with self._lock:
                if len(events) >= self._capacity:
                    events.popleft()
                    self._dropped += 1
        was_empty = not events
        events.append((task_id, attempt, job_id, state, time_s, extra))
        if was_empty and self.on_first is not None:
            self.on_first()
        elif len(events) == self.batch and self.on_batch is not None:
            self.on_batch()

    def drain(self, describe: Callable[[Any], dict[str, Any]] | None = None) -> tuple[list[list[Any]], list[dict[str, Any]], int]:
        """Take everything buffered as (events, descs, dropped) for one TaskEvents message.

        Wire event: [task_id, attempt, job_id, state, time_s, [desc indexes], start_s(, earlier)].
        Facts shared by many events (a function's description, this worker's node and pid) are
        sent once per batch in `descs`. All of one attempt's events within the batch travel as
        one wire event: the last state and its time, the RUNNING time in start_s, and the other
        earlier (state, time) pairs flat in `earlier` -- a short task costs the head one event
        from its owner (submitted and finished) and one from its worker (started and finished)."""
        events = self._events
        out: list[list[Any]] = []
        descs: list[dict[str, Any]] = []
        by_key: dict[Any, int] = {}
        in_batch: dict[tuple[bytes, int], int] = {}  # (task id, attempt) -> its event in `out`
        # specs of one .remote() call site share their function and resources objects: a key on
        # those objects' identities saves building the full key once per event (a million queued
        # tasks are a million events); the entry holds both objects, so neither id is reused by
        # another object while this batch is described
        by_identity: dict[tuple[Any, ...], tuple[int, Any, Any]] = {}

        def index_of(extra: Any) -> int:
            if type(extra) is TaskSpec:
                quick = (id(extra.function), id(extra.resources), extra.kind, extra.method_name,
                         extra.name, extra.actor_id, extra.parent_task_id)
                known = by_identity.get(quick)
                if known is None:
                    known = by_identity[quick] = (index_by_key(extra), extra.function, extra.resources)
                return known[0]
            return index_by_key(extra)

        def index_by_key(extra: Any) -> int:
            if isinstance(extra, dict):
                key: Any = id(extra)
            elif isinstance(extra, TaskSpec):
                key = _spec_key(extra)
            elif isinstance(extra, tuple):  # (spec, facts of the process that ran it)
                key = (_spec_key(extra[0]), id(extra[1]))
            else:
                key = None
            i = by_key.get(key) if key is not None else None
            if i is None:
                i = len(descs)
                descs.append(extra if isinstance(extra, dict) else (describe(extra) if describe else {}))
                if key is not None:
                    by_key[key] = i
            return i

        with self._lock:
            for _ in range(len(events)):
                task_id, attempt, job_id, state, time_s, extra = events.popleft()
                idx = [] if extra is None else [index_of(extra)]
                key = (task_id, attempt)
                at = in_batch.get(key)
                if at is not None:  # a later event of an attempt already in this batch: one wire event
                    prior = out[at]
                    if prior[3] == "RUNNING" and not prior[6]:
                        prior[6] = prior[4]
                    elif len(prior) == 7:
                        prior.append([prior[3], prior[4]])
                    else:
                        prior[7] += (prior[3], prior[4])
                    prior[3], prior[4] = state, time_s
                    prior[5].extend(idx)
                    continue
                in_batch[key] = len(out)
                out.append([task_id, attempt, job_id, state, time_s, idx, 0.0])  # `earlier` added if needed
            dropped, self._dropped = self._dropped, 0
        return out, descs, dropped

    def __len__(self) -> int:
        return len(self._events)



def _spec_key(spec: TaskSpec) -> tuple[Any, ...]:
    return (spec.function.function_id, spec.kind, spec.method_name, spec.name, spec.actor_id,
            spec.parent_task_id, tuple(spec.resources.items()))


_TYPES = {KIND_ACTOR_CALL: "ACTOR_TASK", KIND_ACTOR_CREATE: "ACTOR_CREATION_TASK"}


def describe_task(extra: Any) -> dict[str, Any]:
    """What a task's spec tells the state API (Ray's TaskState field names)."""
    if isinstance(extra, tuple):  # (spec, facts of the process that ran it)
        spec, facts = extra
        return {**describe_task(spec), **facts}
    if not isinstance(extra, TaskSpec):
        return {}
    spec = extra
    # Ray's form: the function's own name, or Class.method, whatever encloses them (a test's
    # function, another class): filters such as ("func_or_class_name", "=", "Actor.f") match
    func = spec.function.qualname.rsplit(".", 1)[-1]
    if spec.kind == KIND_ACTOR_CALL:
        func = f"{func}.{spec.method_name}"
    elif spec.kind == KIND_ACTOR_CREATE:
        func = f"{func}.__init__"
    return {"name": spec.display_name(), "func_or_class_name": func,
            "type": _TYPES.get(spec.kind, "NORMAL_TASK"), "actor_id": spec.actor_id,
            "parent_task_id": spec.parent_task_id, "required_resources": R.from_fixed(spec.resources),
            "language": "PYTHON"}

