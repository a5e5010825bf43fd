"""GcPacer: full garbage collections paced to the client's tables, never against the program's
own GC settings, and given back when the tables drain."""

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


def pacer_of(size: list[int], enabled: bool = True) -> GcPacer:
    pacer = GcPacer(enabled)
    pacer.sizes.append(lambda: size[0])
    return pacer


def test_small_tables_leave_the_thresholds_alone():
    size = [gc_pacing.MIN_ENTRIES - 1]
    pacer_of(size).update()
    assert gc.get_threshold() == (700, 10, 10)


def test_large_tables_space_full_collections_then_the_base_comes_back():
    size = [1_000_000]
    pacer = pacer_of(size)
    pacer.update()
    t0, t1, t2 = gc.get_threshold()
    assert (t0, t1) == (700, 10)
    # a full collection once the heap has grown by about what the tables hold
    assert t2 == int(1_000_000 * gc_pacing.OBJECTS_PER_ENTRY / 7000)
    size[0] = 10
    pacer.update()
    assert gc.get_threshold() == (700, 10, 10)


def test_the_threshold_has_a_ceiling():
    pacer_of([10**9]).update()
    assert gc.get_threshold()[2] == gc_pacing.MAX_THRESHOLD2


def test_small_moves_do_not_rewrite_the_threshold():
    size = [1_000_000]
    pacer = pacer_of(size)
    pacer.update()
    first = gc.get_threshold()[2]
    size[0] = 1_100_000  # 10% more: not worth a change
    pacer.update()
    assert gc.get_threshold()[2] == first
    size[0] = 2_000_000
    pacer.update()
    assert gc.get_threshold()[2] == 2 * first


def test_a_program_that_sets_its_own_thresholds_keeps_them():
    size = [1_000_000]
    pacer = pacer_of(size)
    pacer.update()
    gc.set_threshold(1000, 20, 30)  # the user's own choice, after the pacer's
    size[0] = 5_000_000
    pacer.update()
    assert gc.get_threshold() == (1000, 20, 30)
    size[0] = 10
    pacer.update()
    assert gc.get_threshold() == (1000, 20, 30)


def test_disabled_collector_or_pacer_changes_nothing():
    gc.disable()
    pacer_of([1_000_000]).update()
    assert gc.get_threshold() == (700, 10, 10)
    gc.enable()
    pacer_of([1_000_000], enabled=False).update()
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
