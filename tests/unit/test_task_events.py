"""TaskEventTable / TaskEventBuffer: merging, bounds, drop counts (pure, no cluster)."""

from raylite._core.head.task_events import TaskEventTable
from raylite._core.task_event_buffer import TaskEventBuffer


def ev(task, state, t, job=b"j1", attempt=0, idx=(), start=0.0):
    return [task, attempt, job, state, t, list(idx), start]


def test_rows_merge_owner_and_worker_events_in_any_order():
    table = TaskEventTable(max_per_job=10)
    table.add([ev(b"t1", "FINISHED", 3.0, idx=[0], start=2.0)], [{"node_id": b"n1", "worker_pid": 7}])
    table.add([ev(b"t1", "PENDING_NODE_ASSIGNMENT", 1.0, idx=[0])], [{"name": "f"}])  # the owner's flush came later
    (row,) = table.rows()
    assert row["state"] == "FINISHED" and row["name"] == "f" and row["worker_pid"] == 7
    assert row["creation_time_s"] == 1.0 and row["start_time_s"] == 2.0 and row["end_time_s"] == 3.0
    assert [e["state"] for e in row["events"]] == ["PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED"]


def test_failed_wins_and_attempts_are_separate_rows():
    table = TaskEventTable()
    table.add([ev(b"t1", "FAILED", 2.0, idx=[0]), ev(b"t1", "RUNNING", 1.0),
               ev(b"t1", "RUNNING", 3.0, attempt=1), ev(b"t1", "FINISHED", 4.0, attempt=1)],
              [{"error_type": "WORKER_DIED"}])
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


def test_buffer_is_bounded_and_drops_count():
    buf = TaskEventBuffer(capacity=3)
    for i in range(5):
        buf.record(bytes([i]), 0, b"j", "PENDING_NODE_ASSIGNMENT", float(i))
    events, descs, dropped = buf.drain()
    assert dropped == 2 and [e[0] for e in events] == [bytes([2]), bytes([3]), bytes([4])]
    assert buf.drain() == ([], [], 0)


def test_drain_shares_descriptions_and_folds_running_into_the_end():
    buf = TaskEventBuffer()
    facts = {"worker_pid": 9}
    for i in range(3):
        buf.record(bytes([i]), 0, b"j", "RUNNING", 1.0 + i, facts)
        buf.record(bytes([i]), 0, b"j", "FINISHED", 1.5 + i)
    buf.record(b"e", 0, b"j", "RUNNING", 5.0, facts)
    buf.record(b"e", 0, b"j", "FAILED", 6.0, {"error_type": "X"})
    buf.record(b"long", 0, b"j", "RUNNING", 7.0, facts)  # still running at the flush
    events, descs, dropped = buf.drain()
    assert descs == [facts, {"error_type": "X"}]
    assert [(e[0], e[3], e[4], e[5], e[6]) for e in events] == [
        (b"\x00", "FINISHED", 1.5, [0], 1.0), (b"\x01", "FINISHED", 2.5, [0], 2.0),
        (b"\x02", "FINISHED", 3.5, [0], 3.0), (b"e", "FAILED", 6.0, [0, 1], 5.0), (b"long", "RUNNING", 7.0, [0], 0.0)]
    table = TaskEventTable()
    table.add(events, descs)
    rows = {r["task_id"]: r for r in table.rows()}
    assert rows[b"e"]["error_type"] == "X" and rows[b"e"]["start_time_s"] == 5.0
    assert rows[b"long"]["state"] == "RUNNING" and rows[b"\x00"]["worker_pid"] == 9


def test_drain_sends_an_owners_submit_and_end_in_one_event_and_the_head_keeps_both():
    buf = TaskEventBuffer()
    desc = {"name": "f"}
    buf.record(b"t", 0, b"j", "PENDING_ARGS_AVAIL", 1.0, desc)
    buf.record(b"t", 0, b"j", "PENDING_NODE_ASSIGNMENT", 2.0, desc)
    buf.record(b"t", 0, b"j", "FINISHED", 4.0)
    buf.record(b"t", 1, b"j", "PENDING_NODE_ASSIGNMENT", 5.0, desc)  # a retry: its own attempt
    events, descs, _ = buf.drain()
    assert [(e[1], e[3], e[4], list(e[7:8] and e[7])) for e in events] == [
        (0, "FINISHED", 4.0, ["PENDING_ARGS_AVAIL", 1.0, "PENDING_NODE_ASSIGNMENT", 2.0]),
        (1, "PENDING_NODE_ASSIGNMENT", 5.0, [])]
    table = TaskEventTable()
    table.add(events, descs)
    table.add([ev(b"t", "FINISHED", 3.5, job=b"j", idx=[0], start=3.0)], [{"worker_pid": 9}])  # the worker's
    rows = {r["attempt_number"]: r for r in table.rows()}
    row = rows[0]
    assert row["state"] == "FINISHED" and row["name"] == "f" and row["worker_pid"] == 9
    assert (row["creation_time_s"], row["start_time_s"], row["end_time_s"]) == (1.0, 3.0, 3.5)
    assert [e["state"] for e in row["events"]] == [
        "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED", "FINISHED"]
    assert rows[1]["state"] == "PENDING_NODE_ASSIGNMENT"


def test_owner_and_worker_ends_keep_the_workers_end_time():
    table = TaskEventTable()
    table.add([ev(b"t", "PENDING_NODE_ASSIGNMENT", 1.0), ev(b"t", "FINISHED", 3.5)])  # the owner's view
    table.add([ev(b"t", "FINISHED", 3.0, start=2.0)])  # the worker's, flushed later
    (row,) = table.rows()
    assert row["state"] == "FINISHED" and row["start_time_s"] == 2.0 and row["end_time_s"] == 3.0


def test_close_job_fails_open_rows_and_a_late_real_end_still_wins():
    table = TaskEventTable()
    table.add([ev(b"done", "FINISHED", 2.0), ev(b"open", "RUNNING", 1.0), ev(b"queued", "PENDING_NODE_ASSIGNMENT", 1.0),
               ev(b"other", "RUNNING", 1.0, job=b"j2")])
    assert table.close_job(b"j1", 9.0, "its job's driver exited") == 2
    rows = {r["task_id"]: r for r in table.rows()}
    assert rows[b"done"]["state"] == "FINISHED" and rows[b"other"]["state"] == "RUNNING"
    for key in (b"open", b"queued"):
        assert rows[key]["state"] == "FAILED" and rows[key]["error_type"] == "WORKER_DIED"
        assert rows[key]["error_message"] == "its job's driver exited" and rows[key]["end_time_s"] == 9.0
    table.add([ev(b"open", "FINISHED", 8.5, idx=[0])], [{"worker_pid": 4}])  # a detached actor's call ended after all
    row = {r["task_id"]: r for r in table.rows()}[b"open"]
    assert row["state"] == "FINISHED" and row["end_time_s"] == 8.5 and row["worker_pid"] == 4
    assert "error_type" not in row and [e["state"] for e in row["events"]] == ["RUNNING", "FINISHED"]
    assert table.close_job(b"j1", 10.0, "again") == 0


def test_a_call_waiting_at_its_actor_shows_that_state_then_runs_with_its_start_time():
    table = TaskEventTable()
    table.add([ev(b"t1", "SUBMITTED_TO_WORKER", 1.0, idx=[0]),
               ev(b"t1", "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", 1.5)], [{"name": "A.g"}])
    (row,) = table.rows()
    assert row["state"] == "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY" and "start_time_s" not in row
    table.add([ev(b"t1", "RUNNING", 2.0), ev(b"t1", "FINISHED", 3.0)], [])
    (row,) = table.rows()
    assert row["state"] == "FINISHED"
    assert row["creation_time_s"] == 1.0 and row["start_time_s"] == 2.0 and row["end_time_s"] == 3.0


def test_a_row_reads_back_with_ray_field_names_and_only_the_times_it_has():
    table = TaskEventTable()
    table.add([ev(b"t1", "PENDING_NODE_ASSIGNMENT", 1.0, idx=[0])], [{"name": "f", "actor_id": b""}])
    (row,) = table.rows()
    assert set(row) == {"task_id", "attempt_number", "job_id", "state", "creation_time_s", "events",
                        "name", "actor_id"}
    table.add([ev(b"t1", "FINISHED", 3.0, start=2.0)])
    (row,) = table.rows()
    assert (row["start_time_s"], row["end_time_s"], row["state"]) == (2.0, 3.0, "FINISHED")
    assert row["events"] == [{"state": "PENDING_NODE_ASSIGNMENT", "created_ms": 1000},
                             {"state": "RUNNING", "created_ms": 2000}, {"state": "FINISHED", "created_ms": 3000}]


def test_the_head_metrics_count_task_attempts_by_state_from_the_table():
    from raylite._core.head.metrics_service import task_state_counts

    table = TaskEventTable()
    table.add([ev(b"t1", "RUNNING", 1.0), ev(b"t2", "RUNNING", 1.0), ev(b"t3", "FINISHED", 2.0)])
    table.add([ev(b"t2", "FAILED", 3.0)])
    assert task_state_counts(table) == {"RUNNING": 1, "FINISHED": 1, "FAILED": 1}
    assert task_state_counts(None) == {}
