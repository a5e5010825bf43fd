"""GcPacer: full garbage collections held back until the client's tables have doubled, never
against the program's own GC settings, and given back when the tables drain or the client
shuts down."""

from __future__ import annotations

import gc

import pytest

from raylite._core.client import gc_pacing
from raylite._core.client.gc_pacing import GcPacer


@pytest.fixture(autouse=True)
def own_thresholds():
    """Each test starts from the interpreter's defaults and leaves the process as it found it."""
    saved = gc.get_threshold()
    enabled = gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    gc.set_threshold(*saved)
    if not enabled:
        gc.disable()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pacer_of(size: list[int], enabled: bool = True, clock: Clock | None = None) -> GcPacer:
    pacer = GcPacer(enabled, clock=clock or Clock())
    pacer.sizes.append(lambda: size[0])
    return pacer


HELD = gc_pacing.MAX_THRESHOLD2


def test_small_tables_leave_the_thresholds_alone():
    pacer_of([gc_pacing.MIN_ENTRIES - 1]).update()
    assert gc.get_threshold() == (700, 10, 10)


def test_full_collections_wait_for_the_tables_to_double():
    size = [100_000]
    pacer = pacer_of(size)
    pacer.update()
    assert gc.get_threshold() == (700, 10, 10)  # none ran yet: the first one may come
    pacer.full_collection_ran()
    pacer.update()
    assert gc.get_threshold() == (700, 10, HELD)  # held back while the tables grow
    size[0] = 190_000
    pacer.update()
    assert gc.get_threshold()[2] == HELD
    size[0] = 200_000  # doubled since the last full collection: the interpreter decides again
    pacer.update()
    assert gc.get_threshold() == (700, 10, 10)
    pacer.full_collection_ran()
    pacer.update()
    assert gc.get_threshold()[2] == HELD


def test_a_full_collection_is_let_through_after_max_gap_s():
    clock = Clock()
    size = [100_000]
    pacer = pacer_of(size, clock=clock)
    pacer.update()
    pacer.full_collection_ran()
    pacer.update()
    assert gc.get_threshold()[2] == HELD
    clock.now += gc_pacing.MAX_GAP_S
    pacer.update()
    assert gc.get_threshold()[2] == 10


def test_drained_tables_and_shutdown_give_the_threshold_back():
    size = [100_000]
    pacer = pacer_of(size)
    pacer.update()
    pacer.full_collection_ran()
    pacer.update()
    size[0] = 10
    pacer.update()
    assert gc.get_threshold() == (700, 10, 10)
    size[0] = 100_000
    pacer.update()
    assert gc.get_threshold()[2] == HELD
    pacer.close()
    assert gc.get_threshold() == (700, 10, 10)
    pacer.update()  # closed: it never touches the thresholds again
    assert gc.get_threshold() == (700, 10, 10)


def test_the_collectors_callback_reports_full_collections():
    size = [100_000]
    pacer = pacer_of(size)
    pacer.update()
    gc.collect()  # a full collection: the pacer hears of it through gc.callbacks
    pacer.update()
    assert gc.get_threshold()[2] == HELD
    pacer.close()


def test_a_program_that_sets_its_own_thresholds_keeps_them():
    size = [100_000]
    pacer = pacer_of(size)
    pacer.update()
    pacer.full_collection_ran()
    pacer.update()
    gc.set_threshold(1000, 20, 30)  # the user's own choice, after the pacer's
    size[0] = 10
    pacer.update()
    pacer.close()
    assert gc.get_threshold() == (1000, 20, 30)


def test_disabled_collector_or_pacer_changes_nothing():
    gc.disable()
    pacer = pacer_of([100_000])
    pacer.full_collection_ran()
    pacer.update()
    assert gc.get_threshold() == (700, 10, 10)
    gc.enable()
    pacer = pacer_of([100_000], enabled=False)
    pacer.full_collection_ran()
    pacer.update()
    assert gc.get_threshold() == (700, 10, 10)


def test_tick_measures_once_per_batch_of_changes():
    calls = []
    pacer = GcPacer(True)
    pacer.sizes.append(lambda: calls.append(1) or 0)
    for _ in range(gc_pacing.CHECK_EVERY - 1):
        pacer.tick()
    assert calls == []
    pacer.tick()
    assert calls == [1]
    pacer.tick(gc_pacing.CHECK_EVERY * 3)  # one release of many objects: one measurement
    assert calls == [1, 1]


def test_a_forked_child_starts_with_the_interpreters_threshold():
    import os

    size = [100_000]
    pacer = pacer_of(size)
    pacer.update()
    pacer.full_collection_ran()
    pacer.update()
    assert gc.get_threshold()[2] == HELD
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its threshold and leave at once
        os.write(write, str(gc.get_threshold()[2]).encode())
        os._exit(0)
    os.close(write)
    child_threshold = os.read(read, 32).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child_threshold == "10"
    assert gc.get_threshold()[2] == HELD  # the parent's pacing goes on
    pacer.close()


def test_an_update_from_inside_an_update_returns_at_once():
    """A collection that starts inside update() may finalize ObjectRefs, whose release ticks
    the pacer again on the same thread: that must not wait on the pacer's own lock."""
    size = [100_000]
    pacer = pacer_of(size)
    pacer._lock.acquire()  # as if this thread were inside update()
    try:
        pacer.update()  # returns instead of deadlocking
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        pacer._lock.release()
    pacer.close()
