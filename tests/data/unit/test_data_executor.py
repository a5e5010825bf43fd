"""The streaming executor: memory budget, backpressure, errors, shutdown, progress."""

import io
import threading
import time

import pytest

import raylite.data as rd
from raylite.data._internal.planner import autodetect_parallelism
from raylite.data._internal.progress import ProgressReporter

MB = 1024 * 1024
BLOCK_ROWS = 1024
ROW_SHAPE = (128,)  # int64 -> 1 KiB per row, 1 MiB per block


def _wait_for(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.005)
    raise AssertionError("condition not reached")


def _quiet(ex):
    return all(op.num_running() == 0 for op in ex.ops)


def test_slow_consumer_stops_producers_at_the_budget(local, data_context):
    data_context.execution_options.resource_limits.object_store_memory = 4 * MB
    ds = rd.range_tensor(40 * BLOCK_ROWS, shape=ROW_SHAPE, override_num_blocks=40).map_batches(lambda b: b)
    ex = ds._start_execution()
    try:
        first = ex.next_bundle(timeout_s=10)
        assert first is not None
        _wait_for(lambda: _quiet(ex) and local.tasks_submitted > 1)
        time_to_settle = local.tasks_submitted
        assert ex.usage_bytes() <= 4 * MB + MB
        assert time_to_settle < 40, "producers ran ahead of the consumer past the budget"
        rows = first.num_rows()
        while (b := ex.next_bundle(timeout_s=10)) is not None:
            rows += b.num_rows()
        assert rows == 40 * BLOCK_ROWS
        assert ex.peak_usage_bytes <= 4 * MB + MB
    finally:
        ex.shutdown()


def test_larger_than_budget_stream_stays_bounded_end_to_end(local, data_context):
    data_context.execution_options.resource_limits.object_store_memory = 3 * MB
    ds = rd.range_tensor(64 * BLOCK_ROWS, shape=ROW_SHAPE, override_num_blocks=64)
    total = 0
    for batch in ds.iter_batches(batch_size=4096, prefetch_batches=1):
        total += len(batch["data"])
    assert total == 64 * BLOCK_ROWS  # 64 MiB streamed
    assert "peak held" in ds.stats()
    peak_mb = float(ds.stats().split("peak held ")[1].split(" MB")[0])
    assert peak_mb <= 4 * MB / 1e6 + 0.5


def test_block_bigger_than_the_budget_still_flows(local, data_context):
    data_context.execution_options.resource_limits.object_store_memory = 1024
    assert rd.range_tensor(4 * BLOCK_ROWS, shape=ROW_SHAPE, override_num_blocks=4).count() == 4 * BLOCK_ROWS
    ds = rd.range_tensor(4 * BLOCK_ROWS, shape=ROW_SHAPE, override_num_blocks=4).map_batches(lambda b: b)
    assert sum(len(b["data"]) for b in ds.iter_batches(batch_size=None)) == 4 * BLOCK_ROWS


def test_unfused_pipeline_under_tight_budget_completes_in_order(local, data_context):
    data_context.execution_options.resource_limits.object_store_memory = 2 * MB
    ds = (rd.range_tensor(16 * BLOCK_ROWS, shape=ROW_SHAPE, override_num_blocks=16)
          .map_batches(lambda b: b, num_cpus=0.5)
          .map_batches(lambda b: {"first": b["data"][:, 0]}, num_cpus=0.25))
    out = [int(x) for b in ds.iter_batches(batch_size=None) for x in b["first"]]
    assert out == list(range(16 * BLOCK_ROWS))


def test_task_error_reaches_the_consumer_and_stops_the_loop(local):
    def fail(batch):
        raise RuntimeError("udf exploded")

    ds = rd.range(100, override_num_blocks=4).map_batches(fail)
    ex = ds._start_execution()
    with pytest.raises(RuntimeError, match="udf exploded"):
        while ex.next_bundle(timeout_s=10) is not None:
            pass
    _wait_for(lambda: not ex._thread.is_alive())


def test_consumer_break_shuts_the_executor_down(local):
    before = {t for t in threading.enumerate() if t.name.startswith("data-executor")}
    for _ in rd.range(10_000, override_num_blocks=50).iter_batches(batch_size=10):
        break
    _wait_for(lambda: {t for t in threading.enumerate() if t.name.startswith("data-executor")} <= before)


def test_progress_reporter_draws_one_line_per_operator(local):
    ds = rd.range(10).map(lambda r: r, num_cpus=0.5).filter(lambda r: True, num_cpus=0.25)
    ex = ds._start_execution()
    list(ex)
    stream = io.StringIO()
    rep = ProgressReporter(ex.ops, enabled=True, stream=stream, force=True)
    rep.update(final=True)
    text = stream.getvalue()
    assert "ReadRange->Map(<lambda>)" in text and "Filter(<lambda>)" in text and "10 rows" in text
    assert not ProgressReporter(ex.ops, enabled=False, stream=stream, force=True).enabled


def test_autodetect_parallelism():
    ctx = rd.DataContext()
    assert autodetect_parallelism(8_000, 2, ctx) == 4  # tiny data: 2 x CPUs
    assert autodetect_parallelism(50 * MB, 2, ctx) == 50  # one block per MiB
    assert autodetect_parallelism(10_000 * MB, 2, ctx) == 200
    assert autodetect_parallelism(100_000 * MB, 2, ctx) == 782  # no block above 128 MiB


def test_actor_pools_holding_every_cpu_is_an_error_not_a_hang(local):
    class Ident:
        def __call__(self, batch):
            return batch

    ds = rd.range(10).map(lambda r: r, num_cpus=1).map_batches(Ident, concurrency=2, num_cpus=1)
    with pytest.raises(RuntimeError, match="cannot make progress.*Map\\(<lambda>\\).*MapBatches\\(Ident\\)"):
        ds.take_all()


def test_progress_shows_total_percent_and_eta_where_the_total_is_known(local):
    ds = rd.range(1000, override_num_blocks=4).map(lambda r: r)
    ex = ds._start_execution()
    src = ex.ops[0]
    assert src.expected_rows() == 1000  # the range's read tasks know their rows before running
    list(ex)
    stream = io.StringIO()
    ProgressReporter(ex.ops, enabled=True, stream=stream, force=True).update(final=True)
    text = stream.getvalue()
    assert "1000/1000" in text and "100% [##########]" in text, text


def test_progress_line_mid_run_has_eta_and_without_a_total_has_none():
    from raylite.data._internal.operators import OpStats
    from raylite.data._internal.progress import render_line

    class FakeOp:
        name = "ReadRange->Map(f)"

        def __init__(self, total, tasks=None):
            self.stats = OpStats(tasks=2, blocks_out=2, rows_out=250)
            self._total, self._tasks = total, tasks

        def expected_rows(self):
            return self._total

        def expected_tasks(self):
            return self._tasks

        def num_running(self):
            return 1

    line = render_line(FakeOp(1000), elapsed_s=5.0)  # 50 rows/s, 750 left: 15 s
    assert "250/1000" in line and " 25% [##        ]" in line and "ETA 0:00:15" in line, line
    files = render_line(FakeOp(None, tasks=4), elapsed_s=5.0)  # a listing of 4 files, rows unknown
    assert "1/4 tasks" in files and " 25%" in files and "ETA 0:00:15" in files, files
    bare = render_line(FakeOp(None), elapsed_s=5.0)
    assert "%" not in bare and "ETA" not in bare and "250 rows" in bare, bare
