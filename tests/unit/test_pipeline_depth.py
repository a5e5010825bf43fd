"""How many short tasks an owner pipelines onto one worker (client/leases.py).

The depth follows the tasks' service time on the worker, so about PIPELINE_WINDOW_S of work
waits there: enough that the worker never idles between pushes, little enough that a burst's
tail still spreads. A task that waited behind others on its worker is timed from the previous
reply, not from its push, so a deep pipeline does not read as slow tasks (and make the depth
swing between deep and one).
"""

from __future__ import annotations

import collections
from types import SimpleNamespace

from raylite._core.client.leases import PIPELINE_BELOW_S, PIPELINE_WINDOW_S, Leases
from raylite._core.client.records import Lease, SchedulingQueue
from raylite._core.config import Config


def make(avg: float, queued: int = 100, leases: int = 1) -> tuple[Leases, SchedulingQueue]:
    links = SimpleNamespace(config=Config(), loop=None)
    q = SchedulingQueue(key=(), resources={}, runtime_env={}, strategy=[], description="f")
    q.avg_task_s = avg
    q.tasks = collections.deque(range(queued))
    q.leases = [object()] * leases
    return Leases(links), q  # type: ignore[arg-type]


def test_short_tasks_fill_the_window_up_to_the_cap() -> None:
    most = Config().max_tasks_in_flight_per_worker
    assert make(20e-6)[0]._pipeline_depth(make(20e-6)[1]) == most
    leases, q = make(PIPELINE_WINDOW_S / 4)
    assert leases._pipeline_depth(q) == 4
    leases, q = make(PIPELINE_BELOW_S * 0.9)
    assert leases._pipeline_depth(q) == 2  # never below two while pipelined


def test_long_tasks_and_short_queues_go_one_at_a_time() -> None:
    leases, q = make(PIPELINE_BELOW_S * 2)
    assert leases._pipeline_depth(q) == 1
    leases, q = make(20e-6, queued=2, leases=2)  # nothing beyond one task per lease to pipeline
    assert leases._pipeline_depth(q) == 1


def lease_on(q: SchedulingQueue) -> Lease:
    return Lease(lease_id=b"l", worker_id=b"w", conn=None, queue=q)  # type: ignore[arg-type]


def test_a_queued_task_is_timed_from_the_previous_reply(monkeypatch) -> None:
    _, q = make(0.001)
    lease = lease_on(q)
    now = [10.0]
    monkeypatch.setattr("raylite._core.client.leases.time.monotonic", lambda: now[0])
    Leases._note_service_time(lease, pushed_at=9.999)  # pushed to an idle worker: 1 ms
    assert abs(q.avg_task_s - 0.001) < 1e-9
    now[0] = 10.0001  # pushed long before (queued behind the first), back 0.1 ms after it
    Leases._note_service_time(lease, pushed_at=9.9)
    assert abs(q.avg_task_s - (0.8 * 0.001 + 0.2 * 0.0001)) < 1e-9
    assert lease.last_reply_at == 10.0001
