"""Pace Python's full garbage collections to the growth of the client's own tables.

Why: a driver that queues a million tasks holds about five GC-tracked objects per task (its
ObjectRef, the object entry, the reference count, the task record and spec). CPython 3.11 runs a
full collection whenever the objects that survived into the old generation since the last one
exceed a quarter of it, and each full collection walks the whole heap: submitting 1,000,000
tasks ran 21 full collections costing 7.4 s of the 21 s it took (0.35 s each at the end, a
pause for every thread of the process); 300,000 actor calls in a burst, 18 costing 5.5 s of
23 s. Those objects are not garbage: they are the work the program asked for.

While the client's tables hold MIN_ENTRIES entries or more, the pacer holds full collections
back (the collector's third threshold at MAX_THRESHOLD2) until the tables have doubled since the
last full collection, or MAX_GAP_S have passed; then it gives the interpreter's own threshold
back until the next full collection has run. A heap of n entries is then walked a few times in
all, not about five times over. It gives the thresholds back for good as the tables drain and
when the client shuts down. It never overrides a program that set its own thresholds (or
disabled the collector): it manages the third threshold only while that is the one it last set
or the process's own. `RAYLITE_GC_PACING=0` turns it off.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

# below this many table entries the interpreter's own pacing is left alone
MIN_ENTRIES = 50_000
# while held back: about 70 million allocations between full collections at the default first
# two thresholds -- reference cycles made meanwhile are still collected, only later
MAX_THRESHOLD2 = 10_000
# a full collection is let through at least this often while the tables stay large
MAX_GAP_S = 60.0
# how many table changes (counted by `tick`) between two measurements
CHECK_EVERY = 1024


class GcPacer:
    """One per client, in its ClientLinks: the components whose tables hold the objects add a
    measure of their size to `sizes`, and `tick` as their tables change (on submission, on
    completion, on release; from the user's threads and the I/O thread)."""

    def __init__(self, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.sizes: list[Callable[[], int]] = []  # each: how many entries a table holds now
        self._clock = clock
        self._lock = threading.Lock()
        self._changes = 0
        self._base2: int | None = None  # the process's own third threshold, before any change
        self._set2: int | None = None  # what this pacer last set (None: nothing set)
        self._entries = 0  # the tables' size at the last measurement
        self._entries_at_full = 0  # ... and when the last full collection ran
        self._full_at = clock()
        if enabled:
            _watch(self)

    def tick(self, changes: int = 1) -> None:
        """Cheap: measures the tables again only once every CHECK_EVERY changes."""
        self._changes += changes
        if self._changes >= CHECK_EVERY:
            self._changes = 0
            self.update()

    def full_collection_ran(self) -> None:
        """From the collector's callback (any thread): the next one waits for new growth."""
        self._entries_at_full = self._entries
        self._full_at = self._clock()

    def update(self) -> None:
        if not self.enabled or not gc.isenabled():
            return
        entries = self._entries = sum(size() for size in self.sizes)
        # never waits: an ObjectRef finalized by a collection that runs inside this very block
        # (any allocation may start one) releases objects and ticks here again, on this thread
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._set(entries)
        finally:
            self._lock.release()

    def _set(self, entries: int) -> None:
        t0, t1, t2 = gc.get_threshold()
        if self._base2 is None:
            self._base2 = t2
        elif t2 != (self._set2 if self._set2 is not None else self._base2):
            self.enabled = False  # the program set its own thresholds: they stay its own
            return
        base2 = self._base2
        wanted = base2
        if entries >= MIN_ENTRIES:
            due = (entries >= 2 * self._entries_at_full
                   or self._clock() - self._full_at >= MAX_GAP_S)
            wanted = base2 if due else max(base2, MAX_THRESHOLD2)
        if wanted != t2:
            gc.set_threshold(t0, t1, wanted)
        self._set2 = None if wanted == base2 else wanted

    def close(self) -> None:
        """The client shuts down: the process's own threshold comes back."""
        locked = self._lock.acquire(timeout=1.0)
        try:
            self._restore()
        finally:
            if locked:
                self._lock.release()

    def _restore(self) -> None:
        if self.enabled and self._set2 is not None and self._base2 is not None:
            t0, t1, t2 = gc.get_threshold()
            if t2 == self._set2:
                gc.set_threshold(t0, t1, self._base2)
        self._set2 = None
        self.enabled = False


# the collector's callback is installed once per process and tells the newest pacer
_current: weakref.ref[GcPacer] | None = None
_installed = False


def _watch(pacer: GcPacer) -> None:
    global _current, _installed
    _current = weakref.ref(pacer)
    if not _installed:
        _installed = True
        gc.callbacks.append(_on_gc)
        # a process forked from this one (multiprocessing, a user's os.fork) has no client to
        # tick the pacer: it starts with the interpreter's own threshold
        os.register_at_fork(after_in_child=_forked)


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2 and _current is not None:
        pacer = _current()
        if pacer is not None:
            pacer.full_collection_ran()


def _forked() -> None:
    pacer = _current() if _current is not None else None
    if pacer is not None:  # the child's only thread: the lock may have been held by another at the fork
        pacer._lock = threading.Lock()
        pacer._restore()
