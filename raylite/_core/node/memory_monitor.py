"""Memory monitor policy: when the node runs low on memory, which worker to kill. Pure.

The node daemon samples memory every `memory_monitor_interval_s` (read_memory), and
when use crosses `memory_usage_threshold` asks `choose_victim` for one worker among
those running tasks or actors. It kills that one, tells the task's owner why (so the
task fails with OutOfMemoryError rather than a bare "worker died"), and waits for it to
exit before choosing again, so one spike costs one worker, not all of them.

Worked example: three workers run tasks started at t=1, t=5 and t=9, plus an actor
started at t=0. Retriable tasks go first, newest first: the one started at t=9 dies; its
owner retries it later (max_retries), and the two older tasks, which have done more
work, keep going. Actors go last, because their state is lost with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_GIB = 1 << 30


@dataclass(frozen=True)
class MemorySnapshot:
    used_bytes: int
    total_bytes: int

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True)
class Candidate:
    """A worker the monitor may kill."""

    worker_id: bytes
    pid: int
    description: str  # the task or actor it runs, for the error message
    started_at: float  # when it got its current lease (monotonic seconds)
    is_actor: bool = False
    retriable: bool = True


def parse_meminfo(text: str) -> MemorySnapshot:
    """Used = MemTotal - MemAvailable (page cache that can be dropped is not 'used')."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = int(parts[0]) * 1024
    total = values.get("MemTotal", 0)
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return MemorySnapshot(max(0, total - available), total)


def apply_cgroup_limit(host: MemorySnapshot, limit_bytes: int | None, current_bytes: int | None) -> MemorySnapshot:
    """Inside a container with a memory limit below the host's RAM, the limit is what counts."""
    if limit_bytes is None or current_bytes is None or limit_bytes >= host.total_bytes:
        return host
    return MemorySnapshot(current_bytes, limit_bytes)


def choose_victim(candidates: Sequence[Candidate]) -> Candidate | None:
    """Retriable tasks first, then other tasks, then actors; the newest first within each."""
    if not candidates:
        return None
    return min(candidates, key=lambda c: (c.is_actor, not c.retriable, -c.started_at))


def over_threshold(snapshot: MemorySnapshot, threshold: float) -> bool:
    return snapshot.total_bytes > 0 and snapshot.fraction > threshold


def oom_reason(snapshot: MemorySnapshot, threshold: float, node: str, is_actor: bool = False) -> str:
    """Why a worker was killed, and the fix; its owner prefixes the task's name."""
    kind = "actor" if is_actor else "task"
    return (f"killed by raylite's memory monitor: node {node} was using {snapshot.used_bytes / _GIB:.2f} GiB "
            f"of {snapshot.total_bytes / _GIB:.2f} GiB ({snapshot.fraction:.0%}), above the threshold of "
            f"{threshold:.0%}, and it was the newest {kind} running there. To avoid this, run fewer tasks at "
            "once on the node (request more num_cpus per task, or limit concurrency), give memory-hungry "
            "tasks and actors a memory= request (e.g. .options(memory=4 * 1024**3)) so the scheduler "
            "does not pack too many of them together, or raise RAYLITE_MEMORY_USAGE_THRESHOLD.")
