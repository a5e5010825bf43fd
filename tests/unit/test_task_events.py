"""TaskEventTable / TaskEventBuffer: merging, bounds, drop counts (pure, no cluster)."""

from raylite._core.task_events import TaskEventBuffer, TaskEventTable


def ev(task, state, t, job=b"j1", attempt=0, **extra):
    return [task, attempt, job, state, t, extra]


def test_rows_merge_owner_and_worker_events_in_any_order():
    table = TaskEventTable(max_per_job=10)
    table.add([ev(b"t1", "RUNNING", 2.0, node_id=b"n1", worker_pid=7), ev(b"t1", "FINISHED", 3.0)])
    table.add([ev(b"t1", "PENDING_NODE_ASSIGNMENT", 1.0, name="f")])  # the owner's flush came later
    (row,) = table.rows()
    assert row["state"] == "FINISHED" and row["name"] == "f" and row["worker_pid"] == 7
    assert row["creation_time_s"] == 1.0 and row["start_time_s"] == 2.0 and row["end_time_s"] == 3.0
    assert [e["state"] for e in row["events"]] == ["PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED"]


def test_failed_wins_and_attempts_are_separate_rows():
    table = TaskEventTable()
    table.add([ev(b"t1", "FAILED", 2.0, error_type="WORKER_DIED"), ev(b"t1", "RUNNING", 1.0),
               ev(b"t1", "RUNNING", 3.0, attempt=1), ev(b"t1", "FINISHED", 4.0, attempt=1)])
    rows = {r["attempt_number"]: r for r in table.rows()}
    assert rows[0]["state"] == "FAILED" and rows[0]["error_type"] == "WORKER_DIED"
    assert rows[1]["state"] == "FINISHED"


def test_per_job_cap_drops_oldest_and_counts():
    table = TaskEventTable(max_per_job=3)
    table.add([ev(bytes([i]), "FINISHED", float(i)) for i in range(5)])
    table.add([ev(b"x", "FINISHED", 1.0, job=b"j2")])
    assert [r["task_id"] for r in table.rows(b"j1")] == [bytes([2]), bytes([3]), bytes([4])]
    assert table.dropped == {b"j1": 2}
    assert len(table.rows(b"j2")) == 1 and len(table) == 4
    assert len(table.rows(limit=2)) == 2


def test_buffer_is_bounded_and_describes_on_drain():
    buf = TaskEventBuffer(capacity=3)
    for i in range(5):
        buf.record(bytes([i]), 0, b"j", "RUNNING", float(i), ("spec", i))
    events, dropped = buf.drain(lambda extra: {"described": extra[1]})
    assert dropped == 2 and [e[0] for e in events] == [bytes([2]), bytes([3]), bytes([4])]
    assert events[0][5] == {"described": 2}
    assert buf.drain() == ([], 0)
