"""Which workers a node has and in what state, with no processes: the pool's bookkeeping.

Each worker goes STARTING -> IDLE <-> LEASED, or ACTOR; STOPPING once killed; then DEAD.
Every state change goes through `set_state`, which keeps two indexes: the idle workers and
the number of starting workers per runtime environment. The lease table (lease_table.py)
asks both on every grant, so they answer in O(1) however many workers (thousands of
actors) the node holds. Starting and killing processes is worker_pool.py's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class WorkerRecord:
    worker_id: bytes
    env_key: str
    pid: int = 0
    conn: Any = None  # rpc.Connection once registered
    address: str = ""
    state: str = "STARTING"  # STARTING | IDLE | LEASED | ACTOR | STOPPING | DEAD
    lease_id: bytes = b""
    lessee: Any = None
    actor_id: bytes = b""
    held: dict[str, int] = field(default_factory=dict)  # resources held by the lease or actor
    gpu_ids: list[int | str] = field(default_factory=list)  # devices given with `held` (indexes, or UUIDs)
    device_ids: dict[str, list[int | str]] = field(default_factory=dict)  # other accelerators' devices (neuron_cores, TPU, ...)
    blocked: bool = False
    exit_info: str = ""
    started_at: float = 0.0
    busy_since: float = 0.0  # when its current lease or actor began (the memory monitor's age)
    kill_reason: str = ""


class WorkerIndex:
    """The node's workers by id and pid, with the idle and starting indexes."""

    def __init__(self) -> None:
        self.workers: dict[bytes, WorkerRecord] = {}
        self.by_pid: dict[int, WorkerRecord] = {}
        self._idle: dict[str, dict[bytes, WorkerRecord]] = {}  # env key -> idle workers, oldest first
        self._starting: dict[str, int] = {}  # env key -> workers forked but not registered yet
        self.starting_total = 0

    def add_starting(self, worker_id: bytes, key: str, *, now: float) -> WorkerRecord:
        """Count a worker being started for runtime environment `key`."""
        rec = WorkerRecord(worker_id, key, started_at=now)
        self.workers[worker_id] = rec
        self._starting[key] = self._starting.get(key, 0) + 1
        self.starting_total += 1
        return rec

    def set_state(self, rec: WorkerRecord, state: str) -> None:
        """Move a worker to `state`, keeping the indexes; DEAD also forgets it.

        A worker that was killed never becomes IDLE again (it goes to STOPPING until its exit
        is seen): the SIGKILL and the closed connection that reports it are apart in time, and
        a lease returned in between (its placement group was just removed, say) used to put
        the dying process back in the idle index, where the next actor got it and failed with
        "the actor's worker died while starting"."""
        if state == "IDLE" and rec.kill_reason:
            state = "STOPPING"
        old = rec.state
        if old == state:
            return
        if old == "STARTING":
            self._starting[rec.env_key] -= 1
            self.starting_total -= 1
        elif old == "IDLE":
            idle = self._idle[rec.env_key]
            del idle[rec.worker_id]
            if not idle:
                del self._idle[rec.env_key]
        rec.state = state
        if state == "IDLE":
            self._idle.setdefault(rec.env_key, {})[rec.worker_id] = rec
        elif state == "DEAD":
            if self.workers.get(rec.worker_id) is rec:
                del self.workers[rec.worker_id]

    def idle(self, key: str) -> WorkerRecord | None:
        """The longest-idle worker for this runtime environment, if any."""
        idle = self._idle.get(key)
        return next(iter(idle.values())) if idle else None

    def has_idle(self) -> bool:
        return bool(self._idle)

    def starting(self, key: str) -> int:
        return self._starting.get(key, 0)

    def doom(self, rec: WorkerRecord, reason: str) -> None:
        """Decide that `rec` stops: from now on it is never handed out again (see set_state)."""
        rec.kill_reason = rec.kill_reason or reason or "stopped by its node"
        if rec.state == "IDLE":
            self.set_state(rec, "STOPPING")
