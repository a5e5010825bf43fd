"""Pace Python's full garbage collections to the size of the client's own tables.

Why: a driver that queues a million tasks holds about five GC-tracked objects per task (its
ObjectRef, the object entry, the reference count, the task record and spec). CPython 3.11 runs a
full collection whenever the objects that survived into the old generation since the last one
exceed a quarter of it, and each full collection walks the whole heap: submitting 1,000,000
tasks ran 21 full collections costing 7.4 s of the 21 s it took (0.35 s each at the end, a
pause for every thread of the process). Those objects are not garbage: they are the work the
program asked for.

While the client's tables are large, the pacer raises the third GC threshold so that a full
collection comes once the heap has grown by about as much again as those tables hold (instead
of a quarter), which cuts the number of full collections to a few. It gives the thresholds back
as the tables drain. It never overrides a program that set its own thresholds (or disabled the
collector): it manages the third threshold only while it is the one it last set or the
process's initial one. `RAYLITE_GC_PACING=0` turns it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

# GC-tracked objects the client holds per entry of its tables (a task's record and spec, an
# owned object's entry, reference count and ObjectRef), counted over records + entries
OBJECTS_PER_ENTRY = 2.5
# below this many table entries the interpreter's own pacing is left alone
MIN_ENTRIES = 50_000
# the third threshold never goes past this (about 70 million allocations between full
# collections at the default first two thresholds): reference cycles still get collected
MAX_THRESHOLD2 = 10_000
# how many table changes (counted by `tick`) between two measurements
CHECK_EVERY = 1024


class GcPacer:
    """One per client, in its ClientLinks: the components whose tables hold the objects add a
    measure of their size to `sizes`, and `tick` as their tables change (on submission, on
    completion, on release; from the user's threads and the I/O thread)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.sizes: list[Callable[[], int]] = []  # each: how many entries a table holds now
        self._lock = threading.Lock()
        self._changes = 0
        self._base2: int | None = None  # the process's own third threshold, before any change
        self._set2: int | None = None  # what this pacer last set (None: nothing set)

    def tick(self, changes: int = 1) -> None:
        """Cheap: measures the tables again only once every CHECK_EVERY changes."""
        self._changes += changes
        if self._changes >= CHECK_EVERY:
            self._changes = 0
            self.update()

    def update(self) -> None:
        if not self.enabled or not gc.isenabled():
            return
        entries = sum(size() for size in self.sizes)
        with self._lock:
            t0, t1, t2 = gc.get_threshold()
            if self._base2 is None:
                self._base2 = t2
            elif t2 != (self._set2 if self._set2 is not None else self._base2):
                self.enabled = False  # the program set its own thresholds: they stay its own
                return
            base2 = self._base2
            wanted = base2
            if entries >= MIN_ENTRIES and t0 > 0 and t1 > 0:
                # one full collection per (t0 * t1 * t2) net allocations: make that the heap
                # those tables hold, so the heap about doubles between full collections
                wanted = max(base2, min(MAX_THRESHOLD2, int(entries * OBJECTS_PER_ENTRY / (t0 * t1))))
            current = self._set2 if self._set2 is not None else base2
            # change only on a real move (a quarter either way), or back to the base
            if wanted == current or (wanted != base2 and abs(wanted - current) * 4 < current):
                return
            gc.set_threshold(t0, t1, wanted)
            self._set2 = None if wanted == base2 else wanted
