"""What a CoreClient keeps per object, task, lease, scheduling queue, actor and generator."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from raylite._core.task_spec import TaskSpec
from raylite._core.transport import rpc


class _Latch:
    """Counts down from n; wait() returns when it reaches zero (or times out)."""

    __slots__ = ("_n", "_lock")

    def __init__(self, n: int) -> None:
        self._n = n
        self._lock = threading.Lock()
        self._lock.acquire()

    def count_down(self) -> None:
        self._n -= 1
        if self._n == 0:
            with contextlib.suppress(RuntimeError):  # open() released it already
                self._lock.release()

    def open(self) -> None:
        """Release the waiter now, whatever is left to count: a get() of many refs stops waiting
        at the first failed one, as Ray's does."""
        if self._n > 0:
            self._n = 0
            with contextlib.suppress(RuntimeError):  # a racing count_down() released it
                self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        # Wait in slices: an exception injected into this thread (ray.cancel of a task
        # blocked in get()) is only delivered when Python code runs again.
        if timeout is None:
            while not self._lock.acquire(timeout=0.1):
                pass
            return True
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            if self._lock.acquire(timeout=max(0.0, min(left, 0.1))):
                return True
            if left <= 0.1:
                return False


class _FailFastLatch(_Latch):
    """A _Latch that a failed object opens at once (the waker checks the type)."""

    __slots__ = ()


def kind_failed(entry: ObjectEntry) -> bool:
    """The object is an error (a failed task, a dead actor, a lost object)."""
    return entry.kind == "e"


class ObjectEntry:
    """An object this process owns or has fetched: pending (kind None) or its value's form.

    One exists per pending task return, so it is kept small: slots, and no waiter list
    until someone waits (a million queued tasks are a million of these)."""

    __slots__ = ("kind", "payload", "waiters")

    def __init__(self, kind: str | None = None, payload: Any = None) -> None:
        self.kind = kind  # None (pending) | "v" | "e" | "s"
        self.payload = payload
        self.waiters: list | tuple = ()  # _Latch or callables(entry)

    def add_waiter(self, waiter: Any) -> None:
        # one waiter (a get() of many refs registers on each) in a 1-tuple, more in a list
        waiters = self.waiters
        if not waiters:
            self.waiters = (waiter,)
        elif type(waiters) is tuple:
            self.waiters = [*waiters, waiter]
        else:
            waiters.append(waiter)

    def take_waiters(self) -> list | tuple:
        waiters, self.waiters = self.waiters, ()
        return waiters

    def remove_waiter(self, waiter: Any) -> None:
        waiters = self.waiters
        if waiter not in waiters:
            return
        if type(waiters) is tuple:
            self.waiters = tuple(w for w in waiters if w is not waiter)
        else:
            waiters.remove(waiter)


@dataclass(slots=True)
class TaskRecord:
    spec: TaskSpec
    retries_left: int
    retry_exceptions: Any
    dep_ids: list  # object ids pinned (submitted count) until the task finishes
    lease: Any = None
    cancelled: bool = False
    worker_conn: Any = None
    actor_args_waited: bool = False  # an actor call waits for its arguments (actors.py)


@dataclass(eq=False)  # a lease is itself: list removal must not compare every field of every lease
class Lease:
    lease_id: bytes
    worker_id: bytes
    conn: rpc.Connection
    queue: SchedulingQueue
    in_flight: int = 0
    idle_handle: Any = None
    dead: bool = False
    node_conn: Any = None  # the node that granted it (another node after spillback)
    node_id: bytes = b""
    blocked: bool = False  # its worker bounced queued tasks while blocked in get()
    gpu_ids: list = field(default_factory=list)  # devices the node gave this lease
    device_ids: dict = field(default_factory=dict)  # other accelerators' devices it gave
    batch: bytes = b""  # the SPREAD burst it last ran a task of
    last_reply_at: float = 0.0  # monotonic time of its latest reply (Leases._on_reply)
    retiring: bool = False  # its worker reached a function's max_calls: no more pushes


@dataclass
class SchedulingQueue:
    key: tuple
    resources: dict
    runtime_env: dict
    strategy: list
    description: str
    tasks: collections.deque = field(default_factory=collections.deque)
    leases: list = field(default_factory=list)
    requesting: int = 0
    asking: dict = field(default_factory=dict)  # lease id -> (node connection, answered future), local asks in flight
    # moving average of a task's service time on its worker (Leases._note_service_time); queued
    # tasks are pipelined to a worker only while tasks are short, so long tasks still spread
    # over every worker
    avg_task_s: float = 1.0
    # SPREAD: the current burst (b"": none), and whether every node has had a task of it;
    # until then a lease that ran a task of the burst gets no second one. The head says when
    # its pick went round every node (cover_seen); the burst is covered once the leases of
    # that first round (spread_open of them still coming) have had their tasks
    spread_batch: bytes = b""
    spread_covered: bool = False
    spread_cover_seen: bool = False
    spread_open: int = 0
    pump_pending: bool = False  # a _pump is scheduled for this loop turn


@dataclass
class ActorState:
    actor_id: bytes
    conn: Any = None
    connecting: bool = False
    restarts_seen: int = -1
    queue: collections.deque = field(default_factory=collections.deque)
    in_flight: dict = field(default_factory=dict)
    dead_error: Any = None
    seq: int = 0
    kill_when_idle: bool = False
    node_id: bytes = b""
    in_order: bool = True  # from the head's ActorInfo: see _flush_actor
    # calls its link dropped while they ran (no retries left): they fail once the head says why
    # the actor went (ActorCaller._fail_lost_calls), or after LOST_CALL_VERDICT_S
    lost_calls: list = field(default_factory=list)


@dataclass
class GeneratorState:
    items: list = field(default_factory=list)  # ObjectRef
    done: bool = False
    error: Any = None  # (kind, payload) of the task's failure
    waiters: list = field(default_factory=list)
    dynamic: bool = False
    # a dynamic generator re-run to rebuild lost items: how many items the first run made
    # (its refs are out already; the re-run's values refill them, they make no new list)
    rebuilding: int | None = None
