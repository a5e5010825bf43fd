"""Streamed generators of a CoreClient: the items a generator task reports one by one, and
the waits on them (`next()`, `wait()` over generators, a dynamic generator's final list).

The worker running a `num_returns="streaming"` (or "dynamic") task sends each yielded value
as a GeneratorItem to this process, its owner; the task's reply then ends the stream.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raylite import exceptions as E
from raylite._core import protocol as P
from raylite._core import serialization as ser
from raylite._core.client.records import GeneratorState, ObjectEntry, TaskRecord, _Latch
from raylite._core.client.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from raylite._core.ids import ObjectID

if TYPE_CHECKING:
    from raylite._core.client.links import ClientLinks
    from raylite._core.client.objects import ObjectPlane
    from raylite._core.client.ownership import Ownership


class Generators:
    """Owns the state of every generator task this process submitted, by task id."""

    def __init__(self, links: ClientLinks, objects: ObjectPlane, ownership: Ownership) -> None:
        self._links = links
        self._objects = objects
        self._ownership = ownership
        self._lock = links.lock
        self._refs = links.refs
        self.states: dict[bytes, GeneratorState] = {}
        # generator tasks re-run to rebuild lost items (lineage.py), apart from `states`: a
        # streaming generator's consumer may still be reading the first run's items
        self.rebuilds: dict[bytes, GeneratorState] = {}

    def started(self, task_id: bytes, dynamic: bool) -> None:
        self.states[task_id] = GeneratorState(dynamic=dynamic)

    def rebuilding(self, task_id: bytes, items: int) -> None:
        """A generator (dynamic or streaming) runs again to rebuild lost items (lineage.py):
        the `items` refs its first run made get the re-run's values; no new refs are made."""
        self.rebuilds[task_id] = GeneratorState(dynamic=True, rebuilding=items)

    def _state(self, task_id: bytes) -> GeneratorState | None:
        """The state a report of this task's run belongs to: its rebuild's, while one runs."""
        return self.rebuilds.get(task_id) or self.states.get(task_id)

    def retried(self, spec: Any) -> None:
        """A generator task runs again: a dynamic generator's refs are the retry's values only
        (nobody has seen the first attempt's), so its list starts over; a streaming one keeps
        the refs already handed out and the retry's values replace theirs index by index."""
        gen = self._state(spec.task_id)
        if gen is None:
            return
        gen.error = None
        if gen.dynamic:
            with self._lock:
                gen.items = []

    def failed(self, rec: TaskRecord, error: tuple) -> None:
        """The task failed before (or instead of) its reply: the stream ends with `error`."""
        gen = self._state(rec.spec.task_id)
        if gen is not None:
            gen.error = error
            self.finished(rec, None)

    def on_generator_item(self, conn: Any, msg: P.GeneratorItem, rid: int) -> None:
        gen = self._state(msg.task_id)
        oid, kind, payload = msg.item[:3]
        if gen is not None and gen.rebuilding is not None:
            # a lost item waits for this value; one still held elsewhere keeps its copy, and one
            # past the first run's count has no ref (set_entry frees its stored copy)
            if len(msg.item) > 3 and msg.index < gen.rebuilding:
                self._ownership.adopt_contained(oid, msg.item[3])
            self._objects.set_entry(oid, kind, payload)
            with self._lock:
                if msg.index == len(gen.items):  # a retry after a crash starts again at 0
                    gen.items.append(oid)
            return
        self._objects.adopt_value(oid, kind, payload)
        if len(msg.item) > 3:
            self._ownership.adopt_contained(oid, msg.item[3])
        if gen is None or msg.index < len(gen.items):  # a retry's value for a ref already out
            return
        ref = ObjectRef(oid, self._links.address)
        with self._lock:
            gen.items.append(ref)
            waiters, gen.waiters = gen.waiters, []
        for w in waiters:
            w.count_down()

    def finished(self, rec: TaskRecord, reply: P.PushTaskReply | None) -> list[bytes]:
        """The task's reply ended the stream; returns the items that live in a node's store
        (their lineage is recorded, so they can be rebuilt by running the generator again)."""
        gen = self._state(rec.spec.task_id)
        if gen is None:
            return []
        if reply is not None and reply.error_kind:
            gen.error = (reply.returns[0][1], reply.returns[0][2]) if reply.returns else None
        first = rec.spec.return_ids()[0]
        set_entry = self._objects.set_entry
        if gen.rebuilding is not None:
            self._rebuild_finished(rec, gen)
            return []
        if gen.dynamic:
            if gen.error and (reply is None or reply.error_kind != "app"):
                set_entry(first, *gen.error)
            else:
                if gen.error:  # the user's generator raised: its error is the final item, as in Ray
                    self._append_error_item(rec.spec.task_id, gen)
                value = DynamicObjectRefGenerator(list(gen.items))
                so = ser.serialize(value)
                set_entry(first, "v", so.to_inline())
                with self._lock:
                    self._refs.add_contained(first, [(r._id, r._owner) for r in gen.items])
        elif gen.error and (reply is None or reply.error_kind != "app"):
            set_entry(first, *gen.error)  # the task itself failed: completed() raises it
        else:  # it returned, or the user's generator raised (the stream carries that error): None
            set_entry(first, "v", ser.serialize(None).to_inline())
        with self._lock:
            gen.done = True
            waiters, gen.waiters = gen.waiters, []
        for w in waiters:
            w.count_down()
        if gen.dynamic:
            self.states.pop(rec.spec.task_id, None)
        if gen.error:
            return []
        entry = self._objects.entry
        with self._lock:
            items = list(gen.items)
        return [r._id for r in items if (e := entry(r._id)) is not None and e.kind == "s"]

    def _rebuild_finished(self, rec: TaskRecord, gen: GeneratorState) -> None:
        """A rebuilding re-run ended: items it did not make again (it failed, or yielded
        fewer values than the first run) get the error that says why."""
        self.rebuilds.pop(rec.spec.task_id, None)
        made = len(gen.items)
        if made >= (gen.rebuilding or 0):
            return
        if gen.error:
            kind, payload = gen.error
        else:
            err = E.ObjectReconstructionFailedError(
                rec.spec.return_ids()[0].hex(),
                f"the generator task {rec.spec.display_name()} was re-run to rebuild lost items, and "
                f"yielded {made} values where its first run yielded {gen.rebuilding}; a generator "
                "whose results can be rebuilt must yield the same values each time it runs")
            # raised as the task's error (as Ray's), and still an ObjectReconstructionFailedError
            err = E.RayTaskError(rec.spec.display_name(), str(err), err).as_instanceof_cause()
            kind, payload = "e", ser.serialize(err, kind=ser.KIND_ERROR).to_inline()
        for index in range(made, gen.rebuilding or 0):
            self._objects.set_entry(bytes(ObjectID.for_return(rec.spec.task_id, index + 2)), kind, payload)

    def _append_error_item(self, task_id: bytes, gen: GeneratorState) -> None:
        oid = ObjectID.for_return(task_id, len(gen.items) + 2)
        kind, payload = gen.error
        self._objects.adopt_value(oid, kind, payload)
        ref = ObjectRef(oid, self._links.address)
        with self._lock:
            gen.items.append(ref)
        gen.error = None

    def next_generator_item(self, task_id: bytes, index: int, timeout: float | None) -> ObjectRef | None:
        gen = self.states.get(task_id)
        if gen is None:
            return None
        while True:
            with self._lock:
                if index < len(gen.items):
                    return gen.items[index]
                if gen.done:
                    if gen.error:  # as in Ray, the error is the next item: get() of it raises
                        error_item = True
                    else:
                        return None
                else:
                    error_item = False
                    latch = _Latch(1)
                    gen.waiters.append(latch)
            if error_item:
                self._append_error_item(task_id, gen)  # then the stream ends
                continue
            hook = self._links.blocked_hook
            if hook is not None:
                hook(True)
            try:
                if not latch.wait(timeout):
                    raise E.GetTimeoutError("timed out waiting for the next generator item")
            finally:
                if hook is not None:
                    hook(False)

    def wait_with_generators(self, items: list, num_returns: int,
                             timeout: float | None) -> tuple[list, list]:
        """`wait()` over ObjectRefs and streaming generators: a generator is ready when its
        next item has been produced, or when it has ended (next() then stops at once)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        entry = self._objects.entry
        while True:
            gens, flags = [], []
            with self._lock:
                for item in items:
                    if isinstance(item, ObjectRefGenerator):
                        gen = self.states.get(item._task_id)
                        ready = gen is None or item._index < len(gen.items) or gen.done
                        gens.append(gen)
                    else:
                        e = entry(item._id)
                        ready = e is not None and e.kind is not None
                    flags.append(ready)
            left = None if deadline is None else deadline - time.monotonic()
            if sum(flags) >= num_returns or (left is not None and left <= 0):
                break
            self._wait_any([i for i in items if not isinstance(i, ObjectRefGenerator)],
                           [g for g in gens if g is not None], left)
        ready_items, rest = [], []
        for item, flag in zip(items, flags):
            (ready_items if flag and len(ready_items) < num_returns else rest).append(item)
        return ready_items, rest

    def _wait_any(self, refs: list, gens: list, timeout: float | None) -> None:
        """Block until any of these refs is ready or any generator moves (or the timeout)."""
        # make sure every ref has an entry that will be filled
        entries: list[ObjectEntry] = [self._objects.entry_for(r) for r in refs]
        latch = _Latch(1)
        with self._lock:
            if any(e.kind is not None for e in entries):
                return
            for e in entries:
                e.add_waiter(latch)
            for g in gens:
                g.waiters.append(latch)
        try:
            latch.wait(timeout)
        finally:
            with self._lock:
                for e in entries:
                    e.remove_waiter(latch)
                for g in gens:
                    if latch in g.waiters:
                        g.waiters.remove(latch)

    def generator_length(self, task_id: bytes) -> int:
        gen = self.states.get(task_id)
        return len(gen.items) if gen else 0

    def generator_dropped(self, task_id: bytes) -> None:
        gen = self.states.get(task_id)
        if gen is not None and gen.done and not self._links.closed:
            self.states.pop(task_id, None)
